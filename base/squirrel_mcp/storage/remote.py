"""The remote backend: a client of the sync API (docs/api/openapi.yaml), holding ciphertext only.

Used when SQUIRREL_API_BASE_URL is set. Each Storage method is one operation of
the contract, authenticated with the API key as a bearer token:

    load_account     GET  /v1/account      (404 no_account: None)
    create_account   POST /v1/account
    append           POST /v1/records      (409 revision_conflict: RevisionConflict)
    changes_since    GET  /v1/records?after=CURSOR, page after page

What crosses the wire is what the local vault stores: the account's id, KDF
salt and parameters, the wrapped data key and sealed records. Memory text is
sealed by `squirrel_mcp.memories` before it reaches this module.

Failures, and what the client does about them:

- 429: wait what `Retry-After` asks (at most RETRY_AFTER_CAP seconds), then retry;
- 5xx, a refused connection or a timeout: retry after an exponential backoff
  with jitter (BACKOFF_BASE doubling up to BACKOFF_CAP);
- at most MAX_ATTEMPTS attempts, and no retry that would start after
  OPERATION_DEADLINE seconds from the first;
- 401, 403, 404, other 4xx, a redirect, an unreadable answer: StorageError at once.

Every error message names the cause and the server's address; none carries the
API key, a request body or an answer's body (they hold ciphertext).

Retrying an append is safe: a (memory id, revision) pair is stored at most once,
so a retry of an append that did land gets 409; the client then looks at what
the server holds and, if it is byte for byte what it sent (each seal has a
fresh random nonce, so nobody else's record can be identical), counts the
append as done.
"""

from __future__ import annotations

import base64
import binascii
import email.utils
import json
import random
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, TypeVar
from urllib.parse import urlsplit

import requests
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from squirrel_mcp import __version__
from squirrel_mcp.config import check_api_base_url
from squirrel_mcp.crypto import KdfParams
from squirrel_mcp.storage import Account, RevisionConflict, SealedRecord, StorageError

# A read within this many seconds of the last pull uses the decrypted view as it
# is (MemoryStore.refresh). An agent's calls are seconds apart, so in practice
# every call pulls; this only spares a burst of reads (get_context then
# search_memory, a plugin's warm-up) one round trip each. A write always pulls.
PULL_INTERVAL = 2.0

# (connect, read) timeouts of one HTTP request, in seconds.
TIMEOUT = (5.0, 15.0)
MAX_ATTEMPTS = 5
BACKOFF_BASE = 0.5
BACKOFF_CAP = 8.0
RETRY_AFTER_CAP = 30.0
OPERATION_DEADLINE = 60.0

# The contract's limits (docs/api/openapi.yaml).
MAX_APPEND = 500
MAX_CIPHERTEXT_BYTES = 262_144
PAGE_LIMIT = 500

_Hex32 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{32}$")]
_Hex16 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{16}$")]
_Seq = Annotated[int, Field(ge=0, le=2**63 - 1)]
_RevisionNumber = Annotated[int, Field(ge=1, le=2**31 - 1)]
# Base64 of at most MAX_CIPHERTEXT_BYTES bytes.
_Base64 = Annotated[str, StringConstraints(max_length=4 * ((MAX_CIPHERTEXT_BYTES + 2) // 3))]


_M = TypeVar("_M", bound=BaseModel)


class _Answer(BaseModel):
    # Fields a later server adds are ignored; the ones read here are checked.
    model_config = ConfigDict(extra="ignore")


class _Kdf(_Answer):
    alg: Literal["scrypt"]
    salt: _Base64
    n: int
    r: int
    p: int


class _Account(_Answer):
    id: _Hex32
    kdf: _Kdf
    wrappedDataKey: _Base64


class _Record(_Answer):
    seq: _Seq
    memoryId: _Hex16
    revision: _RevisionNumber
    ciphertext: _Base64


class _Page(_Answer):
    records: list[_Record]
    cursor: _Seq
    more: bool


class _ErrorDetail(_Answer):
    code: Annotated[str, StringConstraints(pattern=r"^[a-z_]{1,40}$")]
    memoryId: _Hex16 | None = None
    revision: _RevisionNumber | None = None


class _ErrorBody(_Answer):
    error: _ErrorDetail


def _b64decode(text: str) -> bytes:
    return base64.b64decode(text, validate=True)


def _b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _retry_after(response: requests.Response) -> float | None:
    """Seconds the server asks to wait (`Retry-After`: seconds or an HTTP date), or None."""
    value = response.headers.get("Retry-After", "").strip()
    if not value:
        return None
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


class RemoteStorage:
    """The sync API backend of `squirrel_mcp.storage.Storage`."""

    pull_interval = PULL_INTERVAL

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: tuple[float, float] = TIMEOUT,
        sleep: Callable[[float], None] = time.sleep,
        session: requests.Session | None = None,
    ) -> None:
        """A client of the server at `base_url`: https, or http to loopback (else ConfigError).

        `sleep` and `session` are for tests: a recorder of the waits, a session
        with a recording transport.
        """
        # Checked here as well as at start-up: no code path may send the key in cleartext.
        self._base = check_api_base_url(base_url)
        parts = urlsplit(self._base)
        # How errors name the server: scheme, host and port only.
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self._timeout = timeout
        self._sleep = sleep
        self._session = session or requests.Session()
        self._headers = {
            "Authorization": f"Bearer {api_key}",
            "Accept": "application/json",
            "User-Agent": f"squirrel-mcp/{__version__}",
        }
        # requests.Session is not documented as thread-safe; the server's worker threads share this.
        self._lock = threading.Lock()
        # The highest cursor a pull has returned: where to look when checking a retried append.
        self._seen = 0

    # The Storage methods -------------------------------------------------------

    def load_account(self) -> Account | None:
        """The account of this API key, or None when its slot has none yet."""
        response, _ = self._call("GET", "/v1/account")
        if response.status_code == 404 and self._code(response) == "no_account":
            return None
        self._expect(response, 200, "read the account")
        account = self._parse(_Account, response, "the account")
        try:
            kdf = KdfParams(
                salt=_b64decode(account.kdf.salt), n=account.kdf.n, r=account.kdf.r, p=account.kdf.p
            )
            wrapped = _b64decode(account.wrappedDataKey)
        except binascii.Error:
            raise self._unreadable("the account") from None
        return Account(account_id=account.id, kdf=kdf, wrapped_data_key=wrapped)

    def create_account(self, account: Account) -> None:
        """Store the account in this API key's slot; StorageError if the slot holds one."""
        body = {
            "id": account.account_id,
            "kdf": {
                "alg": "scrypt",
                "salt": _b64encode(account.kdf.salt),
                "n": account.kdf.n,
                "r": account.kdf.r,
                "p": account.kdf.p,
            },
            "wrappedDataKey": _b64encode(account.wrapped_data_key),
        }
        response, attempts = self._call("POST", "/v1/account", body)
        if response.status_code == 409 and self._code(response) == "account_exists":
            # A retried create that did land the first time holds exactly our wrapped key.
            if attempts > 1 and self.load_account() == account:
                return
            raise StorageError(f"the sync server at {self.origin} already holds an account for this API key")
        self._expect(response, 201, "create the account")

    def append(self, records: list[SealedRecord]) -> None:
        """Store the records, all or none; RevisionConflict if a (memory id, revision) is taken.

        The contract takes at most MAX_APPEND records per request, so a longer list
        (an import of one memory with a longer history) goes in order, in several
        requests; a conflict then stops it after the batches already stored, which
        still leaves every memory's history without a gap.
        """
        for start in range(0, len(records), MAX_APPEND):
            self._append_batch(records[start : start + MAX_APPEND])

    def changes_since(self, cursor: int) -> tuple[list[SealedRecord], int]:
        """Records stored after `cursor`, following pages until the server has no more."""
        records: list[SealedRecord] = []
        while True:
            response, _ = self._call("GET", "/v1/records", params={"after": cursor, "limit": PAGE_LIMIT})
            self._expect(response, 200, "read the changes")
            page = self._parse(_Page, response, "the changes")
            seqs = [record.seq for record in page.records]
            # A page must move forward, or a buggy server would keep us looping.
            if (
                seqs != sorted(set(seqs))
                or any(seq <= cursor for seq in seqs)
                or page.cursor < max([cursor, *seqs])
            ):
                raise self._unreadable("the changes")
            if page.more and not page.records:
                raise self._unreadable("the changes")
            try:
                records.extend(
                    SealedRecord(record.memoryId, record.revision, _b64decode(record.ciphertext))
                    for record in page.records
                )
            except binascii.Error:
                raise self._unreadable("the changes") from None
            cursor = page.cursor
            if not page.more:
                break
        with self._lock:
            self._seen = max(self._seen, cursor)
        return records, cursor

    def close(self) -> None:
        """Close the HTTP connections."""
        with self._lock:
            self._session.close()

    # Appending -------------------------------------------------------------------

    def _append_batch(self, records: list[SealedRecord]) -> None:
        if not records:
            return
        body = {
            "records": [
                {"memoryId": r.memory_id, "revision": r.revision, "ciphertext": _b64encode(r.ciphertext)}
                for r in records
            ]
        }
        response, attempts = self._call("POST", "/v1/records", body)
        if response.status_code == 409 and self._code(response) == "revision_conflict":
            # An earlier attempt may have landed before its answer was lost.
            if attempts > 1 and self._holds(records):
                return
            detail = self._detail(response)
            if detail is not None and detail.memoryId is not None and detail.revision is not None:
                raise RevisionConflict(detail.memoryId, detail.revision)
            raise RevisionConflict(records[0].memory_id, records[0].revision)
        self._expect(response, 201, "store the records")

    def _holds(self, records: list[SealedRecord]) -> bool:
        """True when the server holds every one of `records`, byte for byte."""
        with self._lock:
            since = self._seen
        stored, _ = self.changes_since(since)
        held = {(r.memory_id, r.revision): r.ciphertext for r in stored}
        return all(held.get((r.memory_id, r.revision)) == r.ciphertext for r in records)

    # HTTP ------------------------------------------------------------------------

    def _call(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        params: Mapping[str, int] | None = None,
    ) -> tuple[requests.Response, int]:
        """One operation, retried as the module docstring says; the final answer and the attempts made.

        Returns any answer that is not 429 or 5xx (the caller judges it); raises
        StorageError when the retries run out or the server cannot be reached.
        """
        data = None if body is None else json.dumps(body).encode()
        headers = dict(self._headers)
        if data is not None:
            headers["Content-Type"] = "application/json"
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            try:
                with self._lock:
                    response = self._session.request(
                        method,
                        self._base + path,
                        params=params,
                        data=data,
                        headers=headers,
                        timeout=self._timeout,
                        # A redirect could lead the key elsewhere; the URL must be the final one.
                        allow_redirects=False,
                    )
            except requests.Timeout:
                failure = f"the sync server at {self.origin} did not answer within {self._timeout[1]:g} s"
                wait = self._backoff(attempt)
            except requests.ConnectionError:
                failure = f"cannot reach the sync server at {self.origin} (connection failed)"
                wait = self._backoff(attempt)
            except requests.RequestException as error:
                raise StorageError(
                    f"the request to the sync server at {self.origin} failed ({type(error).__name__})"
                ) from None
            else:
                status = response.status_code
                if status == 429:
                    asked = _retry_after(response)
                    failure = f"the sync server at {self.origin} is rate-limiting this API key (429)"
                    if asked is not None and asked > RETRY_AFTER_CAP:
                        raise StorageError(f"{failure}; it asks to wait {asked:.0f} s, try again later")
                    wait = self._backoff(attempt) if asked is None else asked
                elif status >= 500:
                    failure = f"the sync server at {self.origin} failed (HTTP {status})"
                    wait = self._backoff(attempt)
                else:
                    return response, attempt
            if attempt >= MAX_ATTEMPTS or time.monotonic() - started + wait > OPERATION_DEADLINE:
                raise StorageError(f"{failure}; gave up after {attempt} attempts")
            self._sleep(wait)

    @staticmethod
    def _backoff(attempt: int) -> float:
        """Exponential backoff with jitter, so two machines retrying do not retry in step."""
        ceiling = min(BACKOFF_CAP, BACKOFF_BASE * 2.0 ** (attempt - 1))
        return ceiling * (0.5 + random.random() / 2)  # noqa: S311 - jitter, not a secret

    # Answers ---------------------------------------------------------------------

    @staticmethod
    def _detail(response: requests.Response) -> _ErrorDetail | None:
        try:
            return _ErrorBody.model_validate_json(response.content).error
        except ValidationError:
            return None

    def _code(self, response: requests.Response) -> str | None:
        detail = self._detail(response)
        return None if detail is None else detail.code

    def _expect(self, response: requests.Response, status: int, doing: str) -> None:
        """Raise a StorageError naming the cause unless the answer has `status`."""
        got = response.status_code
        if got == status:
            return
        code = self._code(response)
        where = f"the sync server at {self.origin}"
        if got == 401:
            message = f"{where} did not accept SQUIRREL_API_KEY (401): check the key"
        elif got == 403:
            message = f"{where} forbids this API key to {doing} (403)"
        elif got == 404 and code == "no_account":
            message = f"{where} holds no account for this API key yet: run `squirrel-mcp init`"
        elif got == 404:
            message = (
                f"{where} has no such endpoint (404): check that SQUIRREL_API_BASE_URL is the "
                "address of a squirrel-mcp sync server"
            )
        elif 300 <= got < 400:
            message = (
                f"{where} answered with a redirect ({got}): set SQUIRREL_API_BASE_URL to the address "
                "it redirects to"
            )
        else:
            message = f"{where} refused to {doing} (HTTP {got}{f' {code}' if code else ''})"
        raise StorageError(message)

    def _parse(self, model: type[_M], response: requests.Response, what: str) -> _M:
        try:
            return model.model_validate_json(response.content)
        except ValidationError:
            raise self._unreadable(what) from None

    def _unreadable(self, what: str) -> StorageError:
        return StorageError(f"the sync server at {self.origin} sent {what} in a form this client cannot read")
