"""Serving: MCP over stdio (the default command) and the page (`squirrel-mcp ui`).

The server answers the handshake at once and unlocks in the background; when
the unlock fails it keeps serving and answers every tool call with the line it
printed, so the MCP host shows the reason instead of a closed connection.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading

import pluggy

from squirrel_mcp.cli import bridge
from squirrel_mcp.cli.background import open_in_background
from squirrel_mcp.cli.bridge import NOT_TRIED
from squirrel_mcp.core.config import Config
from squirrel_mcp.core.lines import log_line
from squirrel_mcp.plugins.manager import PluginHost, get_plugin_manager, load_plugins

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


def cmd_serve(config: Config, pm: pluggy.PluginManager, bridged: str | None = NOT_TRIED) -> int:
    """Serve MCP over stdio until the client closes it, unlocking the account in the background.

    The handshake and tools/list are answered at once; tool calls wait for the
    unlock. When it fails the server keeps serving: every tool call gets the line
    it printed on stderr. A person at a terminal without SQUIRREL_PASSPHRASE is
    asked for it first, as the other commands ask. Unless SQUIRREL_MCP_SHARED=0, this
    process is a bridge to the vault's one memory process instead (`bridge.bridged`);
    `bridged` is its outcome when the script's entry point tried it already.
    """
    from squirrel_mcp.server.app import create_server
    from squirrel_mcp.server.opening import Opening

    host = PluginHost(pm)
    opening = Opening()
    at_terminal = not config.passphrase and sys.stdin.isatty()
    if bridged == NOT_TRIED:
        bridged = None if at_terminal else bridge.bridged(config, dict(os.environ))
    if bridged == bridge.RELAYED:
        return 0
    if bridged is not None:
        # Refused by the running memory process, or a setting of the sharing is wrong: every
        # tool call is answered the line, as when the unlock fails.
        log_line(bridged)
        opening.failed(f"squirrel-mcp: {bridged}")
    elif at_terminal:
        from squirrel_mcp.cli.unlock import open_store

        store = open_store(config, create=True)
        host.start(config, store)
        opening.opened(store)
    else:
        # A daemon: a client that closes the server mid-unlock must not wait for the unlock to end.
        threading.Thread(
            target=open_in_background,
            args=(config, host, opening, SERVING_WAIT),
            name="squirrel-mcp-open",
            daemon=True,
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
