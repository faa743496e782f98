"""Bounded connections: a cap on how many are open, and a deadline for request headers.

Both HTTP servers use it: the sync server, and the page (inside the vault's
memory process, where a flood of connections to the page would otherwise take
the descriptors every host's connection needs).

uvicorn keeps a connection open for as long as its client keeps it open, and
waits without limit for the headers of its first request. A few dozen clients
sending half a request line each (slowloris) could so hold every file
descriptor of the process, until the accept loop failed with "Too many open
files" and nobody was served.

Two layers bound them. `Listener`, the listening socket, refuses (accepts and
at once closes) a connection whose file descriptor would leave fewer than
FD_RESERVE free: descriptors are numbered lowest-free-first, so the new one's
number counts the open ones exactly, before the event loop accepts a batch of
connections it could not serve. `guarded_protocol` makes uvicorn's h11
protocol class with two guards:

- a header deadline: a connection that has not sent a whole request head
  within `header_timeout` seconds of opening, or of its previous answer, is
  closed (uvicorn's keep-alive timeout stops counting at the first byte, so
  a head trickled after an answer would otherwise have no limit either);
- a cap of `max_connections` open at once: past it, the connection that has
  waited longest for its request head is dropped to make room, so a client
  that sends a whole request at once is served even while the cap is full of
  slow ones; if every open connection is inside a request, the new one is
  dropped instead.

An error in accepting one connection (its peer reset it, a firewall refused
it) is that connection's alone: one warning a minute at most, and the next
turn of the event loop takes the next. Running out of descriptors or memory
is left to the event loop, which stops accepting for a second.

The sync server's request body has its own deadline in its application
(syncserver/app.py, Limits), which can answer 408 there.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import time

from uvicorn.protocols.http.h11_impl import H11Protocol

from squirrel_mcp.serving.limits import UNLIMITED, raise_file_limit

# File descriptors always left free by the listener, for what a request opens:
# database connections (three files each for SQLite: the database, its WAL and
# its shared-memory index) and the event loop's own.
FD_RESERVE = 24
# One warning when the cap is reached (or an accept fails), then at most one a minute.
_WARNING_INTERVAL_S = 60.0
# What the event loop handles itself when accept() fails so: it stops accepting for a second.
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})

_logger = logging.getLogger("uvicorn.error")


class Listener(socket.socket):
    """A listening socket that refuses connections once open files come near the limit."""

    fd_ceiling = 2**31 - 1
    _last_warning = float("-inf")

    def accept(self) -> tuple[socket.socket, object]:
        """The next connection, unless its descriptor is at or past `fd_ceiling`.

        A refused one is closed at once and the event loop told to stop
        accepting for this turn (ConnectionAbortedError); the listening socket
        stays readable while connections wait, so each later turn takes one
        more, and every waiting connection is either served or refused. A
        connection that failed before it was taken is told the same way.
        """
        try:
            connection, address = super().accept()
        except (BlockingIOError, InterruptedError, ConnectionAbortedError):
            raise
        except OSError as error:
            if error.errno in _OUT_OF_RESOURCES:
                raise
            # The event loop would log it and call accept again at once, for as long as it fails.
            self._warn_failed(error)
            raise ConnectionAbortedError("a connection failed before it was taken") from None
        if connection.fileno() >= self.fd_ceiling:
            connection.close()
            raise ConnectionAbortedError("too many open files to take another connection")
        return connection, address

    def _warn_failed(self, error: OSError) -> None:
        now = time.monotonic()
        if now - self._last_warning >= _WARNING_INTERVAL_S:
            self._last_warning = now
            name = errno.errorcode.get(error.errno or 0, type(error).__name__)
            _logger.warning("a connection could not be accepted (%s); taking the next one", name)


def connection_budget(wanted: int, *, others: float = 0.0) -> tuple[int, int, int]:
    """(connections kept open at most, the descriptor ceiling for `Listener`, the file limit).

    Raises the soft limit on open files to the hard one first, as far as the
    system allows. `others` is the share of the limit kept for the rest of the
    process (the page leaves the memory process's hosts half); FD_RESERVE more
    stay free. Connections are then capped at `wanted`, and at half the
    descriptors below the ceiling, so that each may also hold a database file.
    """
    limit = raise_file_limit()
    if limit == UNLIMITED:
        return wanted, 2**31 - 1, limit
    ceiling = max(1, int(limit * (1.0 - others)) - FD_RESERVE)
    return max(1, min(wanted, ceiling // 2)), ceiling, limit


class _GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a header deadline and a cap on open connections."""

    max_connections: int
    header_timeout: float
    # What the warning at the cap suggests, after saying so.
    full_hint: str
    _last_warning = float("-inf")

    # Set when the connection waits for a request head: since when; None inside a request.
    _waiting_since: float | None = None
    _header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Admit the connection, making room if the cap is full, and start its header deadline."""
        super().connection_made(transport)
        self._await_head()
        # Connections dropped in this turn of the event loop are still listed
        # until their connection_lost runs: count only those still open.
        others = [
            c
            for c in self.connections
            if c is not self and isinstance(c, _GuardedH11Protocol) and not c.transport.is_closing()
        ]
        if len(others) >= self.max_connections:
            self._make_room(others)

    def connection_lost(self, exc: Exception | None) -> None:
        """Forget the connection's deadline."""
        self._stop_header_timer()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        """Parse what arrived; a new request cycle means its head is complete."""
        cycle = self.cycle
        super().handle_events()
        if self.cycle is not cycle:
            self._waiting_since = None
            self._stop_header_timer()

    def on_response_complete(self) -> None:
        """The answer went out: the next request head has its own deadline."""
        # Before uvicorn's own handling, which may start a pipelined request at once.
        self._await_head()
        super().on_response_complete()

    def _await_head(self) -> None:
        self._stop_header_timer()
        self._waiting_since = time.monotonic()
        self._header_timer = self.loop.call_later(self.header_timeout, self._header_deadline)

    def _stop_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_deadline(self) -> None:
        self._header_timer = None
        if self._waiting_since is not None and not self.transport.is_closing():
            # No answer is owed: the request never arrived. abort() frees the
            # socket now rather than after a flush of nothing.
            self.transport.abort()

    def _make_room(self, others: list[_GuardedH11Protocol]) -> None:
        waiting = [c for c in others if c._waiting_since is not None]
        cls = type(self)
        now = time.monotonic()
        if now - cls._last_warning >= _WARNING_INTERVAL_S:
            cls._last_warning = now
            _logger.warning(
                "%d connections are open, the most allowed: dropping the slowest%s",
                self.max_connections,
                self.full_hint,
            )
        if waiting:
            oldest = min(waiting, key=lambda c: c._waiting_since or now)
            oldest.transport.abort()
        else:
            self.transport.abort()


def guarded_protocol(
    max_connections: int, header_timeout: float, *, full_hint: str = ""
) -> type[H11Protocol]:
    """The protocol class to give uvicorn as `http`, with these two bounds.

    `full_hint`: words the warning at the cap ends with (" (is a proxy limiting them?)").
    """
    return type(
        "GuardedH11Protocol",
        (_GuardedH11Protocol,),
        {"max_connections": max_connections, "header_timeout": header_timeout, "full_hint": full_hint},
    )
