"""The sync server's Starlette application: the routes of docs/api/openapi.yaml.

Every route but /v1/health and /v1/openapi.yaml needs an API key; the key opens
one slot, and every query names that slot, so a key can only ever reach its own
account. The order of checks is fixed: the key (401, or 429 for an address
sending bad keys too fast), the key's request budget (429), the body's media
type and size (415, 413), then its contents (400). Every error, including
Starlette's own 404 and 405, has the contract's one JSON shape.

Database calls block, so they run in Starlette's thread pool; the rate limiters
are only touched on the event loop, so they need no lock.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from squirrel_mcp.syncserver import keys, validation
from squirrel_mcp.syncserver.database import (
    AccountExists,
    Conflict,
    Database,
    DatabaseUnavailable,
    NoAccount,
    StoredAccount,
)
from squirrel_mcp.syncserver.ratelimit import RateLimiter

MAX_BODY_BYTES = 16 * 1024 * 1024
# About this much ciphertext per page of changes (at least one record).
PAGE_BYTES = 4 * 1024 * 1024
JSON_MEDIA_TYPE = "application/json"


@dataclass(frozen=True)
class Limits:
    """Request budgets: per key, and per client address for requests with a bad key."""

    rate: float = 10.0
    burst: int = 60
    bad_key_rate: float = 1.0
    bad_key_burst: int = 20


def contract() -> bytes:
    """The OpenAPI document this server implements (docs/api/openapi.yaml), as packaged."""
    return resources.files("squirrel_mcp.syncserver").joinpath("openapi.yaml").read_bytes()


class _Unauthorized(Exception):
    """No usable key; always answered the same way."""


class _RateLimited(Exception):
    def __init__(self, retry_after: int) -> None:
        super().__init__("rate limited")
        self.retry_after = retry_after


class _BodyError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def error(
    status: int, code: str, message: str, headers: dict[str, str] | None = None, **extra: Any
) -> Response:
    """An error answer in the contract's one shape: {"error": {"code", "message", ...}}."""
    return JSONResponse({"error": {"code": code, "message": message, **extra}}, status, headers=headers)


def _account_json(account: StoredAccount) -> dict[str, Any]:
    return {
        "id": account.account_id,
        "kdf": {
            "alg": "scrypt",
            "salt": base64.b64encode(account.salt).decode(),
            "n": account.n,
            "r": account.r,
            "p": account.p,
        },
        "wrappedDataKey": base64.b64encode(account.wrapped_data_key).decode(),
        "createdAt": account.created_at,
    }


def create_app(database: Database, limits: Limits | None = None) -> Starlette:
    """The ASGI application serving `database` under the contract."""
    limits = limits or Limits()
    per_key = RateLimiter(limits.rate, limits.burst)
    per_address = RateLimiter(limits.bad_key_rate, limits.bad_key_burst)
    document = contract()

    async def authenticate(request: Request) -> int:
        """The slot of the request's key; budgets checked."""
        key = keys.key_from_header(request.headers.get("authorization"))
        slot = None if key is None else await run_in_threadpool(database.slot_for_key, keys.key_hash(key))
        if slot is None:
            # Bad keys spend the sender's address budget, which slows down guessing
            # (hopeless anyway at 256 bits) and keeps a broken client from hammering.
            address = request.client.host if request.client else None
            wait = per_address.take(address)
            if wait is not None:
                raise _RateLimited(wait)
            raise _Unauthorized
        wait = per_key.take(slot)
        if wait is not None:
            raise _RateLimited(wait)
        return slot

    async def json_body(request: Request) -> Any:
        """The request's JSON body, refused early if it is not JSON or too large."""
        media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if media_type != JSON_MEDIA_TYPE:
            raise _BodyError(415, "unsupported_media_type", "the body must be application/json")
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
            raise _BodyError(413, "payload_too_large", f"the body is over {MAX_BODY_BYTES} bytes")
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_BODY_BYTES:
                raise _BodyError(413, "payload_too_large", f"the body is over {MAX_BODY_BYTES} bytes")
        try:
            # Decoded here: json.loads would also guess UTF-16 or UTF-32 from bytes,
            # and JSON on the wire is UTF-8 (RFC 8259).
            return json.loads(body.decode("utf-8"), parse_constant=_refuse_constant)
        except (ValueError, RecursionError):
            raise validation.InvalidRequest("the body is not valid JSON (UTF-8)") from None

    async def account(request: Request) -> Response:
        slot = await authenticate(request)
        if request.method == "POST":
            new = validation.new_account(await json_body(request))
            created = await run_in_threadpool(database.create_account, slot, new)
            return JSONResponse(_account_json(created), 201)
        return JSONResponse(_account_json(await run_in_threadpool(database.get_account, slot)))

    async def records(request: Request) -> Response:
        slot = await authenticate(request)
        if request.method == "POST":
            new = validation.append_request(await json_body(request))
            stored = await run_in_threadpool(database.append, slot, new)
            return JSONResponse(
                {
                    "stored": [
                        {
                            "seq": r.seq,
                            "memoryId": r.memory_id,
                            "revision": r.revision,
                            "storedAt": r.stored_at,
                        }
                        for r in stored
                    ]
                },
                201,
            )
        after, limit = validation.changes_query(request.query_params)
        page = await run_in_threadpool(database.changes, slot, after, limit, PAGE_BYTES)
        return JSONResponse(
            {
                "records": [
                    {
                        "seq": r.seq,
                        "memoryId": r.memory_id,
                        "revision": r.revision,
                        "ciphertext": base64.b64encode(r.ciphertext).decode(),
                        "storedAt": r.stored_at,
                    }
                    for r in page.records
                ],
                "cursor": page.cursor,
                "more": page.more,
            }
        )

    async def health(request: Request) -> Response:
        await run_in_threadpool(database.ping)
        return JSONResponse({"status": "ok"})

    async def openapi(request: Request) -> Response:
        return Response(document, media_type="application/yaml")

    return Starlette(
        routes=[
            Route("/v1/health", health, methods=["GET"]),
            Route("/v1/openapi.yaml", openapi, methods=["GET"]),
            Route("/v1/account", account, methods=["GET", "POST"]),
            Route("/v1/records", records, methods=["GET", "POST"]),
        ],
        exception_handlers={
            _Unauthorized: _unauthorized,
            _RateLimited: _rate_limited,
            _BodyError: _body_error,
            validation.InvalidRequest: _invalid,
            NoAccount: _no_account,
            AccountExists: _account_exists,
            Conflict: _conflict,
            DatabaseUnavailable: _unavailable,
            HTTPException: _http_error,
            Exception: _internal,
        },
    )


def _refuse_constant(name: str) -> Any:
    # NaN and Infinity are not JSON, though Python's decoder accepts them.
    raise ValueError(f"{name} is not JSON")


# Exception handlers: each turns one failure into its answer. -------------------


async def _unauthorized(request: Request, exc: Exception) -> Response:
    return error(401, "unauthorized", "a valid API key is required", {"WWW-Authenticate": "Bearer"})


async def _rate_limited(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, _RateLimited)
    return error(429, "rate_limited", "too many requests; retry later", {"Retry-After": str(exc.retry_after)})


async def _body_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, _BodyError)
    return error(exc.status, exc.code, exc.message)


async def _invalid(request: Request, exc: Exception) -> Response:
    return error(400, "invalid_request", str(exc))


async def _no_account(request: Request, exc: Exception) -> Response:
    return error(404, "no_account", "this key has no account yet (run `squirrel-mcp init`)")


async def _account_exists(request: Request, exc: Exception) -> Response:
    return error(409, "account_exists", "this key already has an account")


async def _conflict(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, Conflict)
    return error(409, "revision_conflict", str(exc), memoryId=exc.memory_id, revision=exc.revision)


async def _unavailable(request: Request, exc: Exception) -> Response:
    return error(503, "unavailable", "the database is unavailable; retry later")


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        return error(405, "method_not_allowed", "this path does not take that method", headers)
    if exc.status_code == 404:
        return error(404, "not_found", "no such path")
    return error(exc.status_code, "invalid_request", "the request cannot be served", headers)


async def _internal(request: Request, exc: Exception) -> Response:
    return error(500, "internal", "internal server error")
