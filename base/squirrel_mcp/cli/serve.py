"""Serving: MCP over stdio (the default command) and the page (`squirrel-mcp ui`).

The server answers the handshake at once and unlocks in the background; when
the unlock fails it keeps serving and answers every tool call with the line it
printed, so the MCP host shows the reason instead of a closed connection.
"""

from __future__ import annotations

import argparse
import sys
import threading
import traceback
from typing import TYPE_CHECKING

import pluggy

from squirrel_mcp.core.config import Config
from squirrel_mcp.core.lines import log_line
from squirrel_mcp.plugins.manager import PluginHost, get_plugin_manager, load_plugins

if TYPE_CHECKING:
    # Imported when serving only: the other commands do not pay for importing the MCP SDK.
    from squirrel_mcp.server.opening import Opening

# How long the unlock waits for the server to be built before it starts anyway.
SERVING_WAIT = 1.0

# Each command below imports what it runs when it runs: the server answers its handshake
# before it imports the vault's code (storage, cryptography, the memory book), and the
# commands for people do not import the MCP server.


def cmd_browse(config: Config, pm: pluggy.PluginManager, args: argparse.Namespace) -> int:
    """`search`, `list` or `show`: unlock as the server does, then answer as its tool does."""
    from squirrel_mcp.cli import browse
    from squirrel_mcp.cli.unlock import UserError, open_store

    store = open_store(config, create=False)
    try:
        return browse.run(config, pm, args, store)
    except browse.ToolRefused as error:
        raise UserError(str(error)) from None
    finally:
        store.close()


def _open_in_background(config: Config, host: PluginHost, opening: Opening) -> None:
    """Unlock the account and start the plugins; or print why not and tell `opening` the same line.

    It begins once the server is built and serving (or after SERVING_WAIT): the
    unlock's imports and Python work would otherwise share the interpreter with the
    building of the tools and slow the answer to the handshake.
    """
    opening.wait_until_serving(SERVING_WAIT)
    from squirrel_mcp.cli.unlock import error_line, open_store

    try:
        store = open_store(config, create=True)
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
    opening.opened(store)


def cmd_serve(config: Config, pm: pluggy.PluginManager) -> int:
    """Serve MCP over stdio until the client closes it, unlocking the account in the background.

    The handshake and tools/list are answered at once; tool calls wait for the
    unlock. When it fails the server keeps serving: every tool call gets the line
    it printed on stderr. A person at a terminal without SQUIRREL_PASSPHRASE is
    asked for it first, as the other commands ask.
    """
    from squirrel_mcp.server.app import create_server
    from squirrel_mcp.server.opening import Opening

    host = PluginHost(pm)
    opening = Opening()
    if not config.passphrase and sys.stdin.isatty():
        from squirrel_mcp.cli.unlock import open_store

        store = open_store(config, create=True)
        host.start(config, store)
        opening.opened(store)
    else:
        # A daemon: a client that closes the server mid-unlock must not wait for the unlock to end.
        threading.Thread(
            target=_open_in_background, args=(config, host, opening), name="squirrel-mcp-open", daemon=True
        ).start()
    try:
        create_server(opening, host).run("stdio")
    finally:
        host.shutdown()
        opening.close()
    return 0


def cmd_ui(args: argparse.Namespace, pm: pluggy.PluginManager | None) -> int:
    """Unlock the account, then serve the memories' page on 127.0.0.1 until Ctrl-C."""
    from squirrel_mcp.cli.unlock import location, open_store
    from squirrel_mcp.ui.serve import serve

    config = Config.from_env()
    store = open_store(config, create=False)
    if pm is None:
        pm = get_plugin_manager()
        load_plugins(pm)
    host = PluginHost(pm)
    # The same plugins as the server, so search ranks as the agent's does.
    host.start(config, store)
    try:
        serve(store, host, where=location(config), port=args.port, open_browser=not args.no_browser)
    finally:
        host.shutdown()
        store.close()
    return 0
