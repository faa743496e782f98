"""The unlock in the background, for a server that answers its handshake first.

The stdio server and the shared memory process both answer at once and unlock
meanwhile; when the unlock fails they keep serving and answer every tool call
with the line it printed, so the MCP host shows the reason.
"""

from __future__ import annotations

import traceback
from typing import TYPE_CHECKING

from squirrel_mcp.core.config import Config
from squirrel_mcp.core.lines import log_line
from squirrel_mcp.plugins.manager import PluginHost

if TYPE_CHECKING:
    from squirrel_mcp.server.opening import Opening


def open_in_background(config: Config, host: PluginHost, opening: Opening, serving_wait: float) -> None:
    """Unlock the account and start the plugins; or print why not and tell `opening` the same line.

    It begins once the server is built and serving (or after `serving_wait` seconds):
    the unlock's imports and Python work would otherwise share the interpreter with
    the building of the tools and slow the answer to the handshake.
    """
    opening.wait_until_serving(serving_wait)
    from squirrel_mcp.cli.unlock import error_line, open_store, server_creates

    news: list[str] = []
    try:
        store = open_store(config, create=server_creates(config), created=news.append)
    except Exception as error:
        line = error_line(error)
        if line is None:
            # A bug, not the user's to fix: its traceback goes to the log, the agent hears where to look.
            traceback.print_exc()
            line = (
                f"the memory could not be opened: an internal error ({type(error).__name__}); "
                "the server's log has the details"
            )
        log_line(line)
        opening.failed(f"squirrel-mcp: {line}")
        return
    # The plugins start only on an unlocked store: they read memories through it.
    host.start(config, store)
    opening.opened(store, news=news[0] if news else None)
