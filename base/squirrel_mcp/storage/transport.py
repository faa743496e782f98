"""The HTTP transport of the sync API client: one operation, its retries, its deadline and its caps.

RemoteStorage (storage/remote.py) says what each Storage method asks and what
its answer means; this module gets an answer back, or a StorageError saying
why there is none. It knows no endpoint of the contract. Failures, and what it
does about them:

- 429: wait what `Retry-After` asks (at most RETRY_AFTER_CAP seconds), then retry;
- 5xx, a refused connection or a timeout: retry after an exponential backoff
  with jitter (BACKOFF_BASE doubling up to BACKOFF_CAP);
- at most MAX_ATTEMPTS attempts, and no retry that would start after
  OPERATION_DEADLINE seconds from the first;
- any other answer (401, 403, 404, other 4xx, a redirect, ...) goes back to the
  caller, which raises StorageError at once unless it is the one expected.

A hostile or broken server cannot exhaust or hang the client either:

- every operation, its retries and the reading of every answer's body, has one
  wall-clock deadline (OPERATION_DEADLINE): when it passes, the socket in use is
  shut down (storage/deadline.py), so a server that sends its answer a byte at a
  time (each byte within the per-read timeout) is cut off all the same;
- answers are read as a stream and refused past a size cap (the caller's, or
  MAX_ANSWER_BYTES).

Every error message names the cause and the server's address; none carries the
API key, a request body or an answer's body (they hold ciphertext).
"""

from __future__ import annotations

import email.utils
import json
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import requests
import urllib3

from squirrel_mcp import __version__
from squirrel_mcp.core.config import check_api_base_url
from squirrel_mcp.storage import StorageError
from squirrel_mcp.storage.deadline import Watch, WatchedAdapter, watching

# (connect, read) timeouts of one socket operation, in seconds: a silent server is retried sooner.
TIMEOUT = (5.0, 15.0)
MAX_ATTEMPTS = 5
BACKOFF_BASE = 0.5
BACKOFF_CAP = 8.0
RETRY_AFTER_CAP = 30.0
# Wall-clock seconds for one operation: every attempt, every wait and every answer's body.
OPERATION_DEADLINE = 60.0

# Every answer but a page of changes (storage/remote.py has that cap): an account
# (about 2 KiB), an append's 500 stored entries (about 60 KiB), an error.
MAX_ANSWER_BYTES = 2**20
# Bytes read from the socket at a time while streaming an answer.
_CHUNK = 64 * 1024


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


@dataclass(frozen=True)
class Reply:
    """An answer read whole (within its cap): its status and body."""

    status_code: int
    content: bytes


class Transport:
    """Requests to one sync server with one API key, made as the module docstring says."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: tuple[float, float] = TIMEOUT,
        sleep: Callable[[float], None] = time.sleep,
        session: requests.Session | None = None,
    ) -> None:
        """Requests to the server at `base_url`: https, or http to loopback (else ConfigError).

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

    def call(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        params: Mapping[str, int] | None = None,
        what: str,
        limit: int = MAX_ANSWER_BYTES,
    ) -> tuple[Reply, int]:
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
        watch = Watch(OPERATION_DEADLINE)
        attempt = 0
        try:
            while True:
                attempt += 1
                try:
                    with self._lock, watching(watch):
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

    def close(self) -> None:
        """Close the HTTP connections."""
        with self._lock:
            self._session.close()

    def _check(self, watch: Watch, attempts: int) -> None:
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
    ) -> tuple[Reply, tuple[str, float | None] | None]:
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
                return Reply(status, b""), (failure, asked)
            if status >= 500:
                failure = f"the sync server at {self.origin} failed (HTTP {status})"
                return Reply(status, b""), (failure, None)
            return Reply(status, self._read(response, what, limit)), None

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

    def _too_large(self, what: str, limit: int) -> StorageError:
        return StorageError(
            f"the sync server at {self.origin} sent {what} larger than {limit / 2**20:.1f} MiB, "
            "the most this client reads; refused"
        )
