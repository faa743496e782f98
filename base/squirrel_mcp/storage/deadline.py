"""The wall-clock deadline of one sync API operation, and the transport that lets it cut a socket off.

The read timeout bounds each socket read, not an answer: a server sending a
byte every few seconds never trips it. So each operation has a watch: a
timer that, at the deadline, shuts down the socket the operation is using,
which wakes whatever read or write is blocked on it (a TLS handshake, the
request, the headers, the body). The connections below tell the watch of
the current thread which socket that is.

Apart from the client (storage/transport.py, storage/remote.py) because it is
plumbing under requests and urllib3 (their connection and pool classes), and
knows nothing of the sync API.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import urllib3
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.poolmanager import PoolManager


class Watch:
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
def watching(watch: Watch) -> Iterator[None]:
    """Within the block, the connections of this thread report their sockets to `watch`."""
    _current.watch = watch
    try:
        yield
    finally:
        _current.watch = None


def _attach(sock: socket.socket | None) -> None:
    watch: Watch | None = getattr(_current, "watch", None)
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
