"""Graceful stop: on SIGTERM (or Ctrl-C) the server drains, then exits, so a rolling restart loses nothing.

Draining, for `--drain-seconds` (0 by default): every request that arrives is
answered 503 (`/v1/health` included, so a load balancer's health check takes the
instance out of its rotation), with `Retry-After: 1` and `Connection: close`; a
client of the contract retries a 503, and through a load balancer the retry
reaches another instance. Requests that were already running when the signal
came are not touched. After the drain, uvicorn's own shutdown follows: it stops
listening, closes idle connections and waits for every request still running to
finish before the process exits (then by the signal, re-raised, as uvicorn does).
A second signal cuts the drain short; a third Ctrl-C is uvicorn's forced exit.

A 503 is safe to retry for any request, an append included: it was answered
before the application saw the request, so nothing was stored.
"""

from __future__ import annotations

import json
import time
from types import FrameType

import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send

from squirrel_mcp.core.lines import log_line

PROGRAM = "squirrel-mcp-sync"
_REFUSAL = json.dumps(
    {"error": {"code": "unavailable", "message": "the server is stopping; retry (another instance)"}}
).encode()


class Drain:
    """Whether this process is stopping, and since when."""

    def __init__(self, seconds: float) -> None:
        """A drain that lasts `seconds` once started (0: uvicorn's shutdown follows at once)."""
        if seconds < 0:
            raise ValueError("a drain cannot last less than 0 seconds")
        self.seconds = seconds
        self.started_at: float | None = None

    @property
    def draining(self) -> bool:
        """True once a stop signal has come."""
        return self.started_at is not None

    def start(self) -> None:
        """Start draining (a second call changes nothing)."""
        if self.started_at is None:
            self.started_at = time.monotonic()

    def over(self) -> bool:
        """True when the drain has lasted its time."""
        return self.started_at is not None and time.monotonic() - self.started_at >= self.seconds


class RefuseWhileDraining:
    """ASGI middleware: while draining, every new HTTP request is answered 503, its connection closed."""

    def __init__(self, app: ASGIApp, drain: Drain) -> None:
        """Wrap `app`; `drain` says when to refuse."""
        self.app = app
        self.drain = drain

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Refuse the request if draining, else pass it on."""
        if scope["type"] != "http" or not self.drain.draining:
            await self.app(scope, receive, send)
            return
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(_REFUSAL)).encode()),
            (b"retry-after", b"1"),
            (b"connection", b"close"),
        ]
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": _REFUSAL})


class DrainingServer(uvicorn.Server):
    """uvicorn's server, whose first stop signal starts a drain (module docstring) before shutting down."""

    def __init__(self, config: uvicorn.Config, drain: Drain) -> None:
        """Serve `config`; stop signals go through `drain`."""
        super().__init__(config)
        self.drain = drain

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """First signal: drain. A signal during the drain: uvicorn's own handling (shut down, then force)."""
        if not self.drain.draining:
            self.drain.start()
            log_line(
                f"stopping: refusing new requests (503) for {self.drain.seconds:g} s, "
                "then finishing those in flight",
                program=PROGRAM,
            )
            if self.drain.seconds > 0:
                # Remembered so that uvicorn re-raises it at exit, as after its own shutdown.
                self._captured_signals.append(sig)
                return
        super().handle_exit(sig, frame)

    async def on_tick(self, counter: int) -> bool:
        """Uvicorn's tick (every 0.1 s), which also ends the drain when its time is up."""
        if self.drain.draining and self.drain.over():
            self.should_exit = True
        return await super().on_tick(counter)
