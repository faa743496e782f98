"""Serve the page on 127.0.0.1 until Ctrl-C: print its one-time address, open the browser.

The address names the page by a random `*.localhost` name of its own
(squirrel_mcp.ui.session), which the browser resolves to 127.0.0.1, so its cookie
goes to no other listener on the address.

The browser is opened on an owner-only file that forwards it to the address
(squirrel_mcp.ui.handoff), never on the address itself: a browser's command line
is readable by every local user, and the address carries the one-time token.

uvicorn's own logging is off: an access log line carries the URL, and a URL
here carries a search query. The guard logs failures by type only.

Any local user can connect to the port, and the memory process serves the page
beside every host's session: the listener and uvicorn's protocol are bounded as
the sync server's are (squirrel_mcp.serving.connections), within half of the
process's descriptors, so that connections to the page never take those the
hosts' connections need.
"""

from __future__ import annotations

import secrets
import socket
import sys
import threading
import webbrowser
from typing import TextIO

import uvicorn

from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.core.config import ConfigError
from squirrel_mcp.plugins.manager import PluginHost
from squirrel_mcp.serving.connections import Listener, connection_budget, guarded_protocol
from squirrel_mcp.ui.app import create_app
from squirrel_mcp.ui.guard import Guard
from squirrel_mcp.ui.handoff import Handoff
from squirrel_mcp.ui.session import Session, page_name

LOOPBACK = "127.0.0.1"
# Seconds Ctrl-C waits for open requests (a browser keeps connections open) before closing them.
GRACEFUL_SHUTDOWN = 3
# Connections open at once: a browser opens six or so to one address; past the cap, the one
# that has waited longest for its request head is dropped.
MAX_CONNECTIONS = 32
# Seconds a connection may take to send a request head (after opening, or after an answer).
HEADER_TIMEOUT = 10.0
# The share of the process's open files left to everything but the page: in the memory
# process, the hosts' connections and the vault's files.
OTHERS_SHARE = 0.5
# Connections waiting to be taken (listen's backlog, which uvicorn sets again).
BACKLOG = 128


def listen(port: int) -> Listener:
    """A socket listening on 127.0.0.1:`port` (0: a free port), made here so the port is known at once.

    It takes no connection whose descriptor would be at or past `fd_ceiling` (set by `Page`).
    """
    # IPPROTO_TCP spelled out: asyncio turns Nagle off only on sockets whose proto says TCP.
    sock = Listener(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    # So a fixed --port can be reused at once after Ctrl-C (its old connections linger in
    # TIME_WAIT); on Linux and macOS it does not let two pages listen on one port. On
    # Windows it would (another program could take the port over), so not there.
    if sys.platform != "win32":
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((LOOPBACK, port))
        sock.listen(BACKLOG)
    except OSError as error:
        sock.close()
        # The command line's one-line error, not "Address already in use: None".
        raise ConfigError(
            f"cannot listen on {LOOPBACK}:{port} ({error.strerror}); try another --port"
        ) from None
    return sock


class Page:
    """The page on 127.0.0.1, listening from the start: its one-time address, its hand-off file.

    Served in this thread (`run`, until Ctrl-C) by `squirrel-mcp ui` on its own, or in a
    thread of its own (`start`, until `stop`) by the vault's memory process. `handoff`:
    a Handoff file is written for the browser, deleted once the token is redeemed, and in
    any case when the page stops.
    """

    def __init__(
        self,
        store: MemoryStore,
        host: PluginHost,
        *,
        where: str,
        port: int,
        handoff: bool,
        idle: float,
    ) -> None:
        self.socket = listen(port)
        self.handoff: Handoff | None = None
        self._thread: threading.Thread | None = None
        try:
            bound = int(self.socket.getsockname()[1])
            token = secrets.token_urlsafe(32)
            name = page_name()
            self.url = f"http://{name}:{bound}/?token={token}"
            if handoff:
                self.handoff = Handoff.write(self.url)
            redeemed = None if self.handoff is None else self.handoff.remove
            # `idle`: the session's idle lifetime as `squirrel-mcp ui` read it (this process may be a host's).
            session = Session(idle)
            app = Guard(
                create_app(store, host, where=where),
                name=name,
                port=bound,
                token=token,
                session=session,
                redeemed=redeemed,
            )
            connections, self.socket.fd_ceiling, _ = connection_budget(MAX_CONNECTIONS, others=OTHERS_SHARE)
            config = uvicorn.Config(
                app,
                http=guarded_protocol(connections, HEADER_TIMEOUT),
                backlog=BACKLOG,
                log_config=None,
                log_level="warning",
                access_log=False,
                lifespan="off",
                server_header=False,
                proxy_headers=False,
                timeout_graceful_shutdown=GRACEFUL_SHUTDOWN,
            )
            self.server = uvicorn.Server(config)
        except BaseException:
            self.close()
            raise

    def run(self) -> None:
        """Serve until interrupted (uvicorn stops on Ctrl-C in the main thread), then close."""
        try:
            # The socket already listens: a browser connecting from now on waits in its queue.
            self.server.run(sockets=[self.socket])
        finally:
            self.close()

    def start(self) -> None:
        """Serve in a thread of its own, until `stop`."""
        self._thread = threading.Thread(target=self.run, name="squirrel-mcp-ui", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """End the page a thread serves (its open requests get GRACEFUL_SHUTDOWN seconds), then close."""
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(GRACEFUL_SHUTDOWN + 5)
        self.close()

    def close(self) -> None:
        """The socket closed and the hand-off file deleted; again is a no-op."""
        self.socket.close()
        if self.handoff is not None:
            self.handoff.remove()


def announce(url: str, out: TextIO = sys.stdout) -> None:
    """The page's address, as `squirrel-mcp ui` prints it."""
    print(f"Your memories, on this computer only: {url}", file=out, flush=True)
    print("The address opens once; Ctrl-C stops the page.", file=out, flush=True)


def open_browser_at(uri: str) -> None:
    """The browser opened on `uri` (a hand-off file's), in a thread.

    In a thread: a browser named by BROWSER is waited for, and it needs the page to answer.
    """
    threading.Thread(target=webbrowser.open, args=(uri,), name="squirrel-mcp-ui-browser", daemon=True).start()


def serve(
    store: MemoryStore,
    host: PluginHost,
    *,
    where: str,
    idle: float,
    port: int = 0,
    open_browser: bool = True,
    out: TextIO = sys.stdout,
) -> None:
    """Serve the page until interrupted; the address with its token goes to `out`, then to the browser.

    The browser gets it through a Handoff file, deleted once the token is redeemed
    or when the page stops.
    """
    page = Page(store, host, where=where, port=port, handoff=open_browser, idle=idle)
    try:
        announce(page.url, out)
        if page.handoff is not None:
            open_browser_at(page.handoff.uri)
    except BaseException:
        page.close()
        raise
    page.run()
