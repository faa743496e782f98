"""The sync server's Starlette application: the routes of the contract, syncserver/openapi.yaml.

Every route but /v1/health and /v1/openapi.yaml needs an API key; the key opens
one slot, and every query names that slot, so a key can only ever reach its own
account. The order of checks is fixed: the key (429 when its sender's address is
out of budget for keys the server has not seen work, then 401), the key's
request budget (429), the body's media type and size (415, 413), its arrival
within the body deadline (408), then its contents (400). Every error, including
Starlette's own 404 and 405, has the contract's one JSON shape.

Database calls block, and so do decoding and checking a body of up to 32 MiB,
so both run in Starlette's thread pool; the rate limiters and the set of keys
seen to work are only touched on the event loop, so they need no lock.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import time
from dataclasses import dataclass, replace
from importlib import resources
from typing import NoReturn, TypeVar

import pydantic_core
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from squirrel_mcp.storage import KeyChanged, KeyChangeForbidden, RevisionConflict, wire
from squirrel_mcp.storage.wire import ErrorCode
from squirrel_mcp.syncserver import keys, validation
from squirrel_mcp.syncserver.database import (
    AccountExists,
    Database,
    NoAccount,
    StoredAccount,
    VerifierExists,
)
from squirrel_mcp.syncserver.pool import DatabaseUnavailable
from squirrel_mcp.syncserver.ratelimit import RateLimiter

MAX_BODY_BYTES = validation.MAX_BODY_BYTES
# About this much ciphertext per page of changes (at least one record).
PAGE_BYTES = 4 * 1024 * 1024
JSON_MEDIA_TYPE = "application/json"
# /v1/health asks the database at most this often; calls in between get the last
# answer, so a flood of health checks costs the database nothing.
HEALTH_CHECK_INTERVAL_S = 5.0
# Keys seen to open a slot, remembered so that they skip the address budget. The
# database is still asked about every request's key (one indexed read), so a key
# revoked by `squirrel-mcp-sync revoke-key` is refused from its next request on.
MAX_KNOWN_KEYS = 10_000

_M = TypeVar("_M", bound=BaseModel)


@dataclass(frozen=True)
class Limits:
    """Request budgets and the body deadline.

    `rate` and `burst` are each key's budget; `bad_key_rate` and
    `bad_key_burst` each client address's budget for keys the server has not
    seen open a slot, spent before the database is asked about one.
    `body_timeout` is the seconds a request body may take to arrive in full.
    """

    rate: float = 10.0
    burst: int = 60
    bad_key_rate: float = 1.0
    bad_key_burst: int = 20
    body_timeout: float = 60.0

    def share(self, instances: int) -> Limits:
        """The limits of one of `instances` instances serving one database behind a load balancer.

        Budgets are kept in each process's memory, so each instance allows
        1/`instances` of every budget (the burst rounded up, at least 1): with
        requests spread evenly (round robin), a key's budget holds across them
        as if one server kept it. A load balancer that sends one key to one
        instance (sticky) would leave it that share only.
        """
        if instances < 1:
            raise ValueError("at least one instance")
        return replace(
            self,
            rate=self.rate / instances,
            burst=max(1, math.ceil(self.burst / instances)),
            bad_key_rate=self.bad_key_rate / instances,
            bad_key_burst=max(1, math.ceil(self.bad_key_burst / instances)),
        )


def contract() -> bytes:
    """The OpenAPI document this server implements (syncserver/openapi.yaml), as packaged."""
    return resources.files("squirrel_mcp.syncserver").joinpath("openapi.yaml").read_bytes()


class _Unauthorized(Exception):
    """No usable key; always answered the same way."""


class _RateLimited(Exception):
    def __init__(self, retry_after: int) -> None:
        super().__init__("rate limited")
        self.retry_after = retry_after


class _BodyError(Exception):
    def __init__(self, status: int, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def error(status: int, code: ErrorCode, message: str, headers: dict[str, str] | None = None) -> Response:
    """An error answer in the contract's one shape: {"error": {"code", "message"}}."""
    return _answer(wire.Error(error=wire.ErrorDetail(code=code, message=message)), status, headers)


def _answer(body: BaseModel, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return JSONResponse(wire.json_body(body), status, headers=headers)


def _account(stored: StoredAccount) -> wire.Account:
    new = wire.NewAccount.of(stored.account)
    return wire.Account(
        id=new.id,
        kdf=new.kdf,
        wrappedDataKey=new.wrappedDataKey,
        keyChangeVerifier=new.keyChangeVerifier,
        createdAt=stored.created_at,
    )


class _Service:
    """The routes' shared state: the database, the budgets, the known keys, the last health check."""

    def __init__(self, database: Database, limits: Limits) -> None:
        self.database = database
        self.limits = limits
        self.per_key = RateLimiter(limits.rate, limits.burst)
        self.per_address = RateLimiter(limits.bad_key_rate, limits.bad_key_burst)
        self.document = contract()
        # A dict for its insertion order (oldest first); the values are unused.
        self.known_keys: dict[bytes, None] = {}
        self.health_lock = asyncio.Lock()
        self.health_checked = float("-inf")
        self.health_ok = False

    async def authenticate(self, request: Request) -> int:
        """The slot of the request's key; budgets checked."""
        key = keys.key_from_header(request.headers.get("authorization"))
        digest = None if key is None else keys.key_hash(key)
        address = request.client.host if request.client else None
        charged = digest is None or digest not in self.known_keys
        if charged:
            # A key not yet seen to work spends its sender's address budget before
            # the database is asked: a stream of bad keys reaches the database at
            # most at that budget's rate, and guessing (hopeless anyway at 256
            # bits) or a broken client is slowed down.
            wait = self.per_address.take(address)
            if wait is not None:
                raise _RateLimited(wait)
        slot = None if digest is None else await run_in_threadpool(self.database.slot_for_key, digest)
        if slot is None or digest is None:
            if digest is not None:
                # Revoked since it was seen to work: back to the address budget.
                self.known_keys.pop(digest, None)
            raise _Unauthorized
        if charged:
            # It works after all: its token goes back, so that good keys never use up
            # their address's budget. Behind a load balancer every client has its
            # address, and an instance just started has seen no key work yet.
            self.per_address.give_back(address)
        if digest not in self.known_keys:
            if len(self.known_keys) >= MAX_KNOWN_KEYS:
                # Dicts keep insertion order: forget the longest known; it costs one lookup.
                del self.known_keys[next(iter(self.known_keys))]
            self.known_keys[digest] = None
        wait = self.per_key.take(slot)
        if wait is not None:
            raise _RateLimited(wait)
        return slot

    async def json_body(self, request: Request, model: type[_M]) -> _M:
        """The request's JSON body as `model`; refused early if not JSON, too large or too slow."""
        body = await self.body(request)
        # Decoding and checking up to 32 MiB takes a good part of a second: off the
        # event loop, so that other requests are served meanwhile.
        return await run_in_threadpool(_decode, body, model)

    async def body(self, request: Request) -> bytes:
        """The request's body, not yet decoded; refused early if not JSON, too large or too slow."""
        media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if media_type != JSON_MEDIA_TYPE:
            raise _BodyError(415, "unsupported_media_type", "the body must be application/json")
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
            raise _BodyError(413, "payload_too_large", f"the body is over {MAX_BODY_BYTES} bytes")
        body = bytearray()
        timeout = self.limits.body_timeout
        try:
            # One deadline for the whole body, not per read: a body trickled a byte
            # at a time would otherwise hold its connection for as long as it likes.
            async with asyncio.timeout(timeout):
                async for chunk in request.stream():
                    body += chunk
                    if len(body) > MAX_BODY_BYTES:
                        raise _BodyError(413, "payload_too_large", f"the body is over {MAX_BODY_BYTES} bytes")
        except TimeoutError:
            raise _BodyError(
                408, "request_timeout", f"the body did not arrive within {timeout:g} s"
            ) from None
        except ClientDisconnect:
            # Nobody is left to answer; this only ends the request without a traceback.
            raise _BodyError(400, "invalid_request", "the client left before its body ended") from None
        return bytes(body)

    async def account(self, request: Request) -> Response:
        """GET and POST /v1/account."""
        slot = await self.authenticate(request)
        if request.method == "POST":
            new = await self.json_body(request, wire.CheckedNewAccount)
            created = await run_in_threadpool(self.database.create_account, slot, new.account())
            return _answer(_account(created), 201)
        return _answer(_account(await run_in_threadpool(self.database.get_account, slot)))

    async def account_key(self, request: Request) -> Response:
        """PUT /v1/account/key: a new passphrase's key, stored with the data key's proof over the one read."""
        slot = await self.authenticate(request)
        change = await self.json_body(request, wire.CheckedKeyChange)
        stored = await run_in_threadpool(
            self.database.replace_key, slot, change.expected.key(), change.new.key(), change.proof_bytes()
        )
        return _answer(_account(stored))

    async def account_verifier(self, request: Request) -> Response:
        """PUT /v1/account/verifier: the key-change verifier of an account that has none yet."""
        slot = await self.authenticate(request)
        new = await self.json_body(request, wire.NewVerifier)
        stored = await run_in_threadpool(self.database.set_verifier, slot, new.verifier())
        return _answer(_account(stored))

    async def records(self, request: Request) -> Response:
        """GET and POST /v1/records."""
        slot = await self.authenticate(request)
        if request.method == "POST":
            answer = await run_in_threadpool(self._append, slot, await self.body(request))
            return Response(answer, 201, media_type=JSON_MEDIA_TYPE)
        after, limit = validation.changes_query(request.query_params)
        answer = await run_in_threadpool(self._changes, slot, after, limit)
        return Response(answer, media_type=JSON_MEDIA_TYPE)

    # The two answers that carry up to 500 records are written straight to JSON, in
    # one pass of pydantic's serializer, from records the server checked when they
    # were appended: building and checking the wire models again (wire.AppendResult,
    # wire.ChangesPage, whose shape tests/sync/test_contract.py holds the answers to)
    # took most of a pull's time on the server. Each goes to the thread pool once:
    # an append's body is decoded and checked there too, since each hand-over to a
    # worker thread and back costs a wait on a busy machine.

    def _append(self, slot: int, body: bytes) -> bytes:
        new = _decode(body, wire.AppendRequest)
        stored = self.database.append(slot, new.sealed())
        entries = [
            {"seq": r.seq, "memoryId": r.memory_id, "revision": r.revision, "storedAt": r.stored_at}
            for r in stored
        ]
        return pydantic_core.to_json({"stored": entries})

    def _changes(self, slot: int, after: int, limit: int) -> bytes:
        page = self.database.changes(slot, after, limit, PAGE_BYTES)
        records = [
            {
                "seq": r.seq,
                "memoryId": r.memory_id,
                "revision": r.revision,
                "ciphertext": base64.b64encode(r.ciphertext).decode(),
                "storedAt": r.stored_at,
            }
            for r in page.records
        ]
        return pydantic_core.to_json({"records": records, "cursor": page.cursor, "more": page.more})

    async def health(self, request: Request) -> Response:
        """GET /v1/health: the database's last answer, asked again at most every few seconds."""
        async with self.health_lock:
            if time.monotonic() - self.health_checked >= HEALTH_CHECK_INTERVAL_S:
                try:
                    await run_in_threadpool(self.database.ping)
                    self.health_ok = True
                except DatabaseUnavailable:
                    self.health_ok = False
                finally:
                    self.health_checked = time.monotonic()
        if not self.health_ok:
            raise DatabaseUnavailable("the database did not answer the last health check")
        return _answer(wire.Health(status="ok"))

    async def openapi(self, request: Request) -> Response:
        """GET /v1/openapi.yaml: the contract, byte for byte."""
        return Response(self.document, media_type="application/yaml")


def create_app(database: Database, limits: Limits | None = None) -> Starlette:
    """The ASGI application serving `database` under the contract."""
    service = _Service(database, limits or Limits())
    return Starlette(
        routes=[
            Route("/v1/health", service.health, methods=["GET"]),
            Route("/v1/openapi.yaml", service.openapi, methods=["GET"]),
            Route("/v1/account", service.account, methods=["GET", "POST"]),
            Route("/v1/account/key", service.account_key, methods=["PUT"]),
            Route("/v1/account/verifier", service.account_verifier, methods=["PUT"]),
            Route("/v1/records", service.records, methods=["GET", "POST"]),
        ],
        exception_handlers={
            _Unauthorized: _unauthorized,
            _RateLimited: _rate_limited,
            _BodyError: _body_error,
            validation.InvalidRequest: _invalid,
            NoAccount: _no_account,
            AccountExists: _account_exists,
            KeyChanged: _key_changed,
            KeyChangeForbidden: _forbidden,
            VerifierExists: _verifier_exists,
            RevisionConflict: _conflict,
            DatabaseUnavailable: _unavailable,
            HTTPException: _http_error,
            Exception: _internal,
        },
    )


def _decode(body: bytes, model: type[_M]) -> _M:
    """The JSON in `body` as `model`; InvalidRequest if it is not JSON in UTF-8 or not that shape."""
    try:
        # Decoded here: json.loads would also guess UTF-16 or UTF-32 from bytes,
        # and JSON on the wire is UTF-8 (RFC 8259).
        document = json.loads(body.decode("utf-8"), parse_constant=_refuse_constant)
    except (ValueError, RecursionError):
        raise validation.InvalidRequest("the body is not valid JSON (UTF-8)") from None
    return validation.request_body(model, document)


def _refuse_constant(name: str) -> NoReturn:
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
    # A body too large or too slow is left unread: the connection cannot carry
    # another request after it, and closing it frees it at once.
    headers = {"Connection": "close"} if exc.status in (408, 413) else None
    return error(exc.status, exc.code, exc.message, headers)


async def _invalid(request: Request, exc: Exception) -> Response:
    return error(400, "invalid_request", str(exc))


async def _no_account(request: Request, exc: Exception) -> Response:
    return error(404, "no_account", "this key has no account yet (run `squirrel-mcp init`)")


async def _account_exists(request: Request, exc: Exception) -> Response:
    return error(409, "account_exists", "this key already has an account")


async def _key_changed(request: Request, exc: Exception) -> Response:
    return error(409, "key_changed", "the account's key is no longer the expected one; nothing was changed")


async def _forbidden(request: Request, exc: Exception) -> Response:
    # The database's reason, one line: no verifier yet, or a proof missing or wrong.
    return error(403, "forbidden", str(exc))


async def _verifier_exists(request: Request, exc: Exception) -> Response:
    return error(
        409, "verifier_exists", "the account already has another key-change verifier; nothing was changed"
    )


async def _conflict(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RevisionConflict)
    detail = wire.ErrorDetail(
        code="revision_conflict", message=str(exc), memoryId=exc.memory_id, revision=exc.revision
    )
    return _answer(wire.Error(error=detail), 409)


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
