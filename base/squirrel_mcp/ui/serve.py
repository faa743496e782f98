"""Serve the page on 127.0.0.1 until Ctrl-C: print its one-time address, open the browser.

The browser is opened on an owner-only file that forwards it to the address
(squirrel_mcp.ui.handoff), never on the address itself: a browser's command line
is readable by every local user, and the address carries the one-time token.

uvicorn's own logging is off: an access log line carries the URL, and a URL
here carries a search query. The guard logs failures by type only.
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
from squirrel_mcp.ui.app import create_app
from squirrel_mcp.ui.guard import Guard
from squirrel_mcp.ui.handoff import Handoff

LOOPBACK = "127.0.0.1"
# Seconds Ctrl-C waits for open requests (a browser keeps connections open) before closing them.
GRACEFUL_SHUTDOWN = 3


def listen(port: int) -> socket.socket:
    """A socket listening on 127.0.0.1:`port` (0: a free port), made here so the port is known at once."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # So a fixed --port can be reused at once after Ctrl-C (its old connections linger in
    # TIME_WAIT); on Linux and macOS it does not let two pages listen on one port. On
    # Windows it would (another program could take the port over), so not there.
    if sys.platform != "win32":
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((LOOPBACK, port))
        sock.listen(128)
    except OSError as error:
        sock.close()
        # The command line's one-line error, not "Address already in use: None".
        raise ConfigError(
            f"cannot listen on {LOOPBACK}:{port} ({error.strerror}); try another --port"
        ) from None
    return sock


def serve(
    store: MemoryStore,
    host: PluginHost,
    *,
    where: str,
    port: int = 0,
    open_browser: bool = True,
    out: TextIO = sys.stdout,
) -> None:
    """Serve the page until interrupted; the address with its token goes to `out`, then to the browser.

    The browser gets it through a Handoff file, deleted once the token is redeemed
    or when the page stops.
    """
    sock = listen(port)
    handoff: Handoff | None = None
    try:
        bound = int(sock.getsockname()[1])
        token = secrets.token_urlsafe(32)
        url = f"http://{LOOPBACK}:{bound}/?token={token}"
        if open_browser:
            handoff = Handoff.write(url)
        redeemed = None if handoff is None else handoff.remove
        app = Guard(create_app(store, host, where=where), port=bound, token=token, redeemed=redeemed)
        config = uvicorn.Config(
            app,
            log_config=None,
            log_level="warning",
            access_log=False,
            lifespan="off",
            server_header=False,
            proxy_headers=False,
            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN,
        )
        # The socket already listens: a browser connecting from now on waits in its queue.
        print(f"Your memories, on this computer only: {url}", file=out, flush=True)
        print("The address opens once; Ctrl-C stops the page.", file=out, flush=True)
        if handoff is not None:
            # In a thread: a browser named by BROWSER is waited for, and it needs the page to answer.
            threading.Thread(
                target=webbrowser.open, args=(handoff.uri,), name="squirrel-mcp-ui-browser", daemon=True
            ).start()
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
        if handoff is not None:
            handoff.remove()
