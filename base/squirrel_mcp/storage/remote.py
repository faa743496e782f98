"""The remote backend: a client of the sync API (syncserver/openapi.yaml), holding ciphertext only.

Used when SQUIRREL_API_BASE_URL is set. Each Storage method is one operation of
the contract, authenticated with the API key as a bearer token:

    load_account     GET  /v1/account      (404 no_account: None)
    create_account   POST /v1/account
    replace_key      PUT  /v1/account/key  (409 key_changed: KeyChanged)
    append           POST /v1/records      (409 revision_conflict: RevisionConflict)
    changes_since    GET  /v1/records?after=CURSOR, page after page

What crosses the wire is what the local vault stores: the account's id, KDF
salt and parameters, the wrapped data key and sealed records. Memory text is
sealed by `squirrel_mcp.book.memories` before it reaches this module.

Failures, and what the client does about them:

- 429: wait what `Retry-After` asks (at most RETRY_AFTER_CAP seconds), then retry;
- 5xx, a refused connection or a timeout: retry after an exponential backoff
  with jitter (BACKOFF_BASE doubling up to BACKOFF_CAP);
- at most MAX_ATTEMPTS attempts, and no retry that would start after
  OPERATION_DEADLINE seconds from the first;
- 401, 403, 404, other 4xx, a redirect, an unreadable answer: StorageError at once.

A hostile or broken server cannot exhaust or hang the client either:

- every operation, its retries and the reading of every answer's body, has one
  wall-clock deadline (OPERATION_DEADLINE): when it passes, the socket in use is
  shut down, so a server that sends its answer a byte at a time (each byte within
  the per-read timeout) is cut off all the same;
- answers are read as a stream and refused past a size cap (MAX_PAGE_BYTES for a
  page of changes, derived from the contract's limits; MAX_ANSWER_BYTES for the rest);
- one pull follows at most MAX_PULL_PAGES pages, MAX_PULL_RECORDS records and
  MAX_PULL_CIPHERTEXT bytes of ciphertext, so a server answering `more: true`
  forever is stopped.

Each refusal is one StorageError line saying what the server did, never what it sent.

Every error message names the cause and the server's address; none carries the
API key, a request body or an answer's body (they hold ciphertext).

Retrying an append is safe: a (memory id, revision) pair is stored at most once,
so a retry of an append that did land gets 409; the client then looks at what
the server holds and, if it is byte for byte what it sent (each seal has a
fresh random nonce, so nobody else's record can be identical), counts the
append as done.
"""

from __future__ import annotations

import email.utils
import json
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar
from urllib.parse import urlsplit

import requests
import urllib3
from pydantic import BaseModel, ValidationError
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.poolmanager import PoolManager

from squirrel_mcp import __version__
from squirrel_mcp.core.config import check_api_base_url
from squirrel_mcp.storage import (
    NO_REMOTE_ACCOUNT,
    Account,
    KeyChanged,
    RevisionConflict,
    SealedRecord,
    StorageError,
    wire,
)

# A read within this many seconds of the last pull uses the decrypted view as it
# is (MemoryStore.refresh). An agent's calls are seconds apart, so in practice
# every call pulls; this only spares a burst of reads (get_context then
# search_memory, a plugin's warm-up) one round trip each. A write always pulls.
PULL_INTERVAL = 2.0

# (connect, read) timeouts of one socket operation, in seconds: a silent server is retried sooner.
TIMEOUT = (5.0, 15.0)
MAX_ATTEMPTS = 5
BACKOFF_BASE = 0.5
BACKOFF_CAP = 8.0
RETRY_AFTER_CAP = 30.0
# Wall-clock seconds for one operation: every attempt, every wait and every answer's body.
OPERATION_DEADLINE = 60.0

# The contract's limits (storage/wire.py).
MAX_APPEND = wire.MAX_RECORDS_PER_APPEND
PAGE_LIMIT = wire.DEFAULT_PAGE
# A page of changes ends after about this much ciphertext (or after its first record).
PAGE_CIPHERTEXT_BYTES = 4 * 2**20


def _base64_length(size: int) -> int:
    return 4 * ((size + 2) // 3)


# What a record's fields other than its ciphertext (seq, memoryId, revision,
# storedAt and their keys, about 120 bytes) may take, generously.
RECORD_FIELDS_BYTES = 256
# The largest page a server keeping the contract sends: the page's ciphertext in
# base64, plus the one record that may cross the line, and every record's other
# fields; doubled, because the contract says "about" and a JSON encoder may
# escape each "/" of base64 as "\/". About 11 MiB.
MAX_PAGE_BYTES = 2 * (
    _base64_length(PAGE_CIPHERTEXT_BYTES) + wire.CIPHERTEXT_CHARS[1] + PAGE_LIMIT * RECORD_FIELDS_BYTES
)
# Every other answer: an account (about 2 KiB), an append's 500 stored entries
# (about 60 KiB), an error.
MAX_ANSWER_BYTES = 2**20
# One pull. A person's memory of thousands of memories, a few revisions each, is a
# large account; these are far beyond it, and stop a server that answers
# `more: true` forever before it fills this process's memory.
MAX_PULL_PAGES = 1_000
MAX_PULL_RECORDS = 250_000
MAX_PULL_CIPHERTEXT = 512 * 2**20
# Bytes read from the socket at a time while streaming an answer.
_CHUNK = 64 * 1024

_M = TypeVar("_M", bound=BaseModel)


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


# The deadline ----------------------------------------------------------------------
#
# The read timeout bounds each socket read, not an answer: a server sending a
# byte every few seconds never trips it. So each operation has a watch: a
# timer that, at the deadline, shuts down the socket the operation is using,
# which wakes whatever read or write is blocked on it (a TLS handshake, the
# request, the headers, the body). The connections below tell the watch of
# the current thread which socket that is.


class _Watch:
    """The wall-clock deadline of one operation, and the socket it is using."""

    def __init__(self, seconds: float) -> None:
        self.expired = False
        self._socket: socket.socket | None = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def attach(self, sock: socket.socket) -> None:
        """Use `sock` from now on; shut it down at once if the deadline has passed."""
        with self._lock:
            self._socket = sock
            if self.expired:
                _shut_down(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            if self._socket is not None:
                _shut_down(self._socket)

    def cancel(self) -> None:
        """The operation ended: the timer must not touch the socket (it may go back to the pool)."""
        self._timer.cancel()
        with self._lock:
            self._socket = None


def _shut_down(sock: socket.socket) -> None:
    # socket.socket's own shutdown, also for a TLS socket: SSLSocket.shutdown would
    # drop its TLS state under the thread reading it. Either way the blocked read
    # sees the end of the stream. OSError: already closed, so nothing is blocked on it.
    with suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


_current = threading.local()


@contextmanager
def _watching(watch: _Watch) -> Iterator[None]:
    _current.watch = watch
    try:
        yield
    finally:
        _current.watch = None


def _attach(sock: socket.socket | None) -> None:
    watch: _Watch | None = getattr(_current, "watch", None)
    if watch is not None and sock is not None:
        watch.attach(sock)


class _WatchedConnection(HTTPConnection):
    """An HTTP connection that tells the current watch which socket it uses."""

    def _new_conn(self) -> socket.socket:
        # Before any TLS handshake, which a slow server could stretch too.
        sock = super()._new_conn()
        _attach(sock)
        return sock

    def request(self, *args: Any, **kwargs: Any) -> None:
        # A kept-alive connection has its socket already; a new one attaches in _new_conn.
        _attach(self.sock)
        super().request(*args, **kwargs)


class _WatchedHTTPSConnection(_WatchedConnection, HTTPSConnection):
    """The HTTPS connection that tells the current watch which socket it uses.

    HTTPSConnection subclasses HTTPConnection, so the watching methods above come
    first in its method order and call on into the TLS ones.
    """


class _WatchedPool(HTTPConnectionPool):
    ConnectionCls = _WatchedConnection


class _WatchedHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPSConnection


_WATCHED_POOLS: dict[str, type[HTTPConnectionPool]] = {"http": _WatchedPool, "https": _WatchedHTTPSPool}


class WatchedAdapter(HTTPAdapter):
    """The requests transport of RemoteStorage: its connections report their sockets to the deadline.

    Directly and through an HTTP(S) proxy. Through a SOCKS proxy (requests[socks])
    the sockets are the SOCKS library's: there the deadline bounds only the waits
    between attempts, and each read has its read timeout.
    """

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        """Requests' pool manager, with connections that report their sockets."""
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = _WATCHED_POOLS

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> PoolManager:
        """Requests' manager for an HTTP(S) proxy (HTTPS_PROXY), with the same connections."""
        manager: PoolManager = super().proxy_manager_for(proxy, **proxy_kwargs)
        # A SOCKS manager has connection classes of its own; only the standard ones are replaced.
        if manager.pool_classes_by_scheme is urllib3.poolmanager.pool_classes_by_scheme:
            manager.pool_classes_by_scheme = _WATCHED_POOLS
        return manager


@dataclass(frozen=True)
class _Reply:
    """An answer read whole (within its cap): its status and body."""

    status_code: int
    content: bytes


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
        with a recording transport (a WatchedAdapter, else TypeError: the
        deadline needs its connections).
        """
        # Checked here as well as at start-up: no code path may send the key in cleartext.
        self._base = check_api_base_url(base_url)
        parts = urlsplit(self._base)
        # How errors name the server: scheme, host and port only.
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self._timeout = timeout
        self._sleep = sleep
        if session is None:
            session = requests.Session()
            session.mount("http://", WatchedAdapter())
            session.mount("https://", WatchedAdapter())
        for prefix in ("http://", "https://"):
            if not isinstance(session.get_adapter(prefix), WatchedAdapter):
                raise TypeError(f"the session's {prefix} adapter must be a WatchedAdapter")
        self._session = session
        self._headers = {
            "Authorization": f"Bearer {api_key}",
            "Accept": "application/json",
            # Bodies are capped as they come off the wire: no compression to inflate past the cap.
            "Accept-Encoding": "identity",
            "User-Agent": f"squirrel-mcp/{__version__}",
        }
        # requests.Session is not documented as thread-safe; the server's worker threads share this.
        self._lock = threading.Lock()
        # The highest cursor a pull has returned: where to look when checking a retried append.
        self._seen = 0

    # The Storage methods -------------------------------------------------------

    def load_account(self) -> Account | None:
        """The account of this API key, or None when its slot has none yet."""
        response, _ = self._call("GET", "/v1/account", what="the account")
        if response.status_code == 404 and self._code(response) == "no_account":
            return None
        self._expect(response, 200, "read the account")
        return self._parse(wire.Account, response, "the account").account()

    def create_account(self, account: Account) -> None:
        """Store the account in this API key's slot; StorageError if the slot holds one."""
        body = wire.json_body(wire.NewAccount.of(account))
        response, attempts = self._call(
            "POST", "/v1/account", body, what="the answer to creating the account"
        )
        if response.status_code == 409 and self._code(response) == "account_exists":
            # A retried create that did land the first time holds exactly our wrapped key.
            if attempts > 1 and self.load_account() == account:
                return
            raise StorageError(f"the sync server at {self.origin} already holds an account for this API key")
        self._expect(response, 201, "create the account")

    def replace_key(self, expected: Account, new: Account) -> None:
        """Store `new`'s key if the server still holds `expected`'s; KeyChanged (nothing changed) if not."""
        if new.account_id != expected.account_id:
            raise ValueError("a key change cannot change the account id")
        body = wire.json_body(wire.KeyChange.of(expected, new))
        response, attempts = self._call(
            "PUT", "/v1/account/key", body, what="the answer to changing the account's key"
        )
        if response.status_code == 409 and self._code(response) == "key_changed":
            # A retried change that did land the first time left exactly our new key.
            if attempts > 1 and self.load_account() == new:
                return
            raise KeyChanged(
                f"the sync server at {self.origin} holds another key for this account than the one read: "
                "another machine changed the passphrase meanwhile; nothing was changed"
            )
        self._expect(response, 200, "change the account's key")

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
        """Records stored after `cursor`, following pages until the server has no more.

        StorageError past MAX_PULL_PAGES pages, MAX_PULL_RECORDS records or
        MAX_PULL_CIPHERTEXT bytes: no real account reaches them in one pull.
        """
        records: list[SealedRecord] = []
        ciphertext = 0
        pages = 0
        while True:
            pages += 1
            if pages > MAX_PULL_PAGES:
                raise self._too_much(f"more than {MAX_PULL_PAGES:,} pages of changes")
            response, _ = self._call(
                "GET",
                "/v1/records",
                params={"after": cursor, "limit": PAGE_LIMIT},
                what="a page of changes",
                limit=MAX_PAGE_BYTES,
            )
            self._expect(response, 200, "read the changes")
            page = self._parse(wire.ChangesPage, response, "the changes")
            seqs = [record.seq for record in page.records]
            # A page must move forward, or a buggy server would keep us looping.
            if (
                seqs != sorted(set(seqs))
                or any(seq <= cursor for seq in seqs)
                or page.cursor < max([cursor, *seqs])
                or len(seqs) > PAGE_LIMIT
            ):
                raise self._unreadable("the changes")
            if page.more and not page.records:
                raise self._unreadable("the changes")
            fresh = page.sealed()
            records.extend(fresh)
            ciphertext += sum(len(record.ciphertext) for record in fresh)
            if len(records) > MAX_PULL_RECORDS:
                raise self._too_much(f"more than {MAX_PULL_RECORDS:,} records")
            if ciphertext > MAX_PULL_CIPHERTEXT:
                raise self._too_much(f"more than {MAX_PULL_CIPHERTEXT // 2**20} MiB of ciphertext")
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
        body = wire.json_body(wire.AppendRequest.of(records))
        response, attempts = self._call("POST", "/v1/records", body, what="the answer to an append")
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
        what: str,
        limit: int = MAX_ANSWER_BYTES,
    ) -> tuple[_Reply, int]:
        """One operation, retried as the module docstring says; the final answer and the attempts made.

        Returns any answer that is not 429 or 5xx (the caller judges it), its body
        read whole if at most `limit` bytes; `what` names the answer in errors.
        Raises StorageError when the retries run out, the server cannot be
        reached, the body is larger, or the deadline passes.
        """
        data = None if body is None else json.dumps(body).encode()
        headers = dict(self._headers)
        if data is not None:
            headers["Content-Type"] = "application/json"
        deadline = time.monotonic() + OPERATION_DEADLINE
        watch = _Watch(OPERATION_DEADLINE)
        attempt = 0
        try:
            while True:
                attempt += 1
                try:
                    with self._lock, _watching(watch):
                        reply, retry = self._attempt(method, path, params, data, headers, what, limit)
                except (requests.Timeout, urllib3.exceptions.ReadTimeoutError):
                    # ReadTimeoutError: a body that stopped coming for the read timeout.
                    self._check(watch, attempt)
                    failure = f"the sync server at {self.origin} did not answer within {self._timeout[1]:g} s"
                    wait = self._backoff(attempt)
                except (requests.ConnectionError, urllib3.exceptions.HTTPError, OSError):
                    self._check(watch, attempt)
                    failure = f"cannot reach the sync server at {self.origin} (connection failed)"
                    wait = self._backoff(attempt)
                except requests.RequestException as error:
                    raise StorageError(
                        f"the request to the sync server at {self.origin} failed ({type(error).__name__})"
                    ) from None
                else:
                    # Cut off at the deadline, a body without a length may look complete.
                    self._check(watch, attempt)
                    if retry is None:
                        return reply, attempt
                    failure, asked = retry
                    wait = self._backoff(attempt) if asked is None else asked
                if attempt >= MAX_ATTEMPTS or time.monotonic() + wait > deadline:
                    raise StorageError(f"{failure}; gave up after {attempt} attempts")
                self._sleep(wait)
        finally:
            watch.cancel()

    def _check(self, watch: _Watch, attempts: int) -> None:
        """StorageError if the operation's deadline has passed (whatever else went wrong, that did)."""
        if watch.expired:
            raise StorageError(
                f"the sync server at {self.origin} did not finish answering within "
                f"{OPERATION_DEADLINE:g} s; gave up after {attempts} attempt{'s' if attempts > 1 else ''}"
            )

    def _attempt(
        self,
        method: str,
        path: str,
        params: Mapping[str, int] | None,
        data: bytes | None,
        headers: dict[str, str],
        what: str,
        limit: int,
    ) -> tuple[_Reply, tuple[str, float | None] | None]:
        """One request: the answer and, for one to retry (429, 5xx), why and the wait asked (if any)."""
        response = self._session.request(
            method,
            self._base + path,
            params=params,
            data=data,
            headers=headers,
            timeout=self._timeout,
            # A redirect could lead the key elsewhere; the URL must be the final one.
            allow_redirects=False,
            # The body is read below, within its cap and under the watch.
            stream=True,
        )
        with response:
            status = response.status_code
            if status == 429:
                asked = _retry_after(response)
                failure = f"the sync server at {self.origin} is rate-limiting this API key (429)"
                if asked is not None and asked > RETRY_AFTER_CAP:
                    raise StorageError(f"{failure}; it asks to wait {asked:.0f} s, try again later")
                return _Reply(status, b""), (failure, asked)
            if status >= 500:
                failure = f"the sync server at {self.origin} failed (HTTP {status})"
                return _Reply(status, b""), (failure, None)
            return _Reply(status, self._read(response, what, limit)), None

    def _read(self, response: requests.Response, what: str, limit: int) -> bytes:
        """The body, as it comes off the wire (no decompression); StorageError past `limit` bytes."""
        declared = response.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > limit:
            raise self._too_large(what, limit)
        body = bytearray()
        for chunk in response.raw.stream(_CHUNK, decode_content=False):
            body += chunk
            if len(body) > limit:
                raise self._too_large(what, limit)
        return bytes(body)

    @staticmethod
    def _backoff(attempt: int) -> float:
        """Exponential backoff with jitter, so two machines retrying do not retry in step."""
        ceiling = min(BACKOFF_CAP, BACKOFF_BASE * 2.0 ** (attempt - 1))
        return ceiling * (0.5 + random.random() / 2)  # noqa: S311 - jitter, not a secret

    # Answers ---------------------------------------------------------------------

    @staticmethod
    def _detail(response: _Reply) -> wire.ErrorDetail | None:
        try:
            return wire.Error.model_validate_json(response.content).error
        except ValidationError:
            return None

    def _code(self, response: _Reply) -> str | None:
        detail = self._detail(response)
        return None if detail is None else detail.code

    def _expect(self, response: _Reply, status: int, doing: str) -> None:
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
            message = f"{where} {NO_REMOTE_ACCOUNT}"
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

    def _parse(self, model: type[_M], response: _Reply, what: str) -> _M:
        try:
            return model.model_validate_json(response.content)
        except ValidationError:
            raise self._unreadable(what) from None

    def _unreadable(self, what: str) -> StorageError:
        return StorageError(f"the sync server at {self.origin} sent {what} in a form this client cannot read")

    def _too_large(self, what: str, limit: int) -> StorageError:
        return StorageError(
            f"the sync server at {self.origin} sent {what} larger than {limit / 2**20:.1f} MiB, "
            "the most this client reads; refused"
        )

    def _too_much(self, what: str) -> StorageError:
        return StorageError(
            f"the sync server at {self.origin} sent {what} in one pull, more than any real account "
            "holds; refused"
        )
