"""Serving: MCP over stdio (the default command) and the page (`squirrel-mcp ui`).

The server answers the handshake at once and unlocks in the background; when
the unlock fails it keeps serving and answers every tool call with the line it
printed, so the MCP host shows the reason instead of a closed connection.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import sys
import threading
from pathlib import Path

import pluggy

from squirrel_mcp.cli import bridge, bridging
from squirrel_mcp.cli.background import open_in_background
from squirrel_mcp.cli.bridge import NOT_TRIED
from squirrel_mcp.core.config import Config, location
from squirrel_mcp.core.hello import MAX_PORT, HelloError, PageRequest, read_page_answer
from squirrel_mcp.core.lines import log_line
from squirrel_mcp.core.projects import ProjectError, session_project
from squirrel_mcp.plugins.manager import PluginHost, get_plugin_manager, load_plugins

# How long the unlock waits for the server to be built before it starts anyway.
SERVING_WAIT = 1.0
# How long `squirrel-mcp ui` waits, after Ctrl-C, for the memory process to stop its page.
PAGE_END_WAIT = 30.0

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
    process is a bridge to the vault's one memory process instead (`bridging.bridged`);
    `bridged` is its outcome when the script's entry point tried it already.
    """
    from squirrel_mcp.server.app import create_server
    from squirrel_mcp.server.opening import Opening

    host = PluginHost(pm)
    opening = Opening()
    at_terminal = not config.passphrase and sys.stdin.isatty()
    if bridged == NOT_TRIED:
        bridged = None if at_terminal else bridging.bridged(config, dict(os.environ))
    if bridged == bridge.RELAYED:
        return 0
    project: str | None = None
    if bridged is None:
        try:
            project = session_project(os.environ, Path.cwd())
        except (ProjectError, OSError) as error:
            # Said as a bad setting is: one line in the log, and every tool call answered it.
            bridged = (
                str(error) if isinstance(error, ProjectError) else "the current directory cannot be read"
            )
    if bridged is not None:
        # Refused by the running memory process, or a setting of the sharing is wrong: every
        # tool call is answered the line, as when the unlock fails.
        log_line(bridged)
        opening.failed(f"squirrel-mcp: {bridged}")
    elif at_terminal:
        from squirrel_mcp.cli.unlock import open_store, server_creates

        news: list[str] = []
        store = open_store(config, create=server_creates(config), created=news.append)
        host.start(config, store)
        opening.opened(store, news=news[0] if news else None)
    else:
        # A daemon: a client that closes the server mid-unlock must not wait for the unlock to end.
        threading.Thread(
            target=open_in_background,
            args=(config, host, opening, SERVING_WAIT),
            name="squirrel-mcp-open",
            daemon=True,
        ).start()
    try:
        create_server(opening, host, project=project).run("stdio")
    finally:
        host.shutdown()
        opening.close()
    return 0


def cmd_ui(args: argparse.Namespace, pm: pluggy.PluginManager | None) -> int:
    """Serve the memories' page on 127.0.0.1 until Ctrl-C.

    The vault's memory process serves it, on the store and plugins its hosts use (started
    as a host's bridge starts it when none runs); with SQUIRREL_MCP_SHARED=0, or where no
    local channel can be made, this process unlocks the account and serves it itself.
    """
    from squirrel_mcp.cli.unlock import UserError, open_store
    from squirrel_mcp.ui.serve import serve
    from squirrel_mcp.ui.session import idle_seconds

    if not 0 <= args.port <= MAX_PORT:
        raise UserError(f"--port must be a port number, 0 to {MAX_PORT} (0: a free one)")
    config = Config.from_env()
    # Read here: the memory process that may serve the page has some host's environment.
    idle = idle_seconds(os.environ)
    served = page_of_memory_process(config, PageRequest(args.port, not args.no_browser, idle))
    if served is not None:
        return served
    store = open_store(config, create=False)
    if pm is None:
        pm = get_plugin_manager()
        load_plugins(pm)
    host = PluginHost(pm)
    # The same plugins as the server, so search ranks as the agent's does.
    host.start(config, store)
    try:
        serve(
            store, host, where=location(config), idle=idle, port=args.port, open_browser=not args.no_browser
        )
    finally:
        host.shutdown()
        store.close()
    return 0


def page_of_memory_process(config: Config, request: PageRequest) -> int | None:
    """The page served by the vault's memory process until Ctrl-C (0), or None: this process serves it.

    None also where there is no vault yet (the page never creates one: the command on its
    own says so). A passphrase asked on the terminal is given to a memory process this
    command starts in its environment, as a host's config gives it.
    """
    from squirrel_mcp.cli.unlock import UserError, from_keychain, get_passphrase
    from squirrel_mcp.ui.serve import announce, open_browser_at

    env = dict(os.environ)
    no_vault = not config.remote and not config.vault_path.expanduser().exists()
    if env.get("SQUIRREL_MCP_SHARED") == "0" or no_vault:
        return None
    config = from_keychain(config)
    if not config.passphrase and sys.stdin.isatty():
        config = config._replace(passphrase=get_passphrase(config, confirm=False))
        env["SQUIRREL_PASSPHRASE"] = config.passphrase or ""
    alone = "the page unlocks the vault on its own"
    way = bridging.bridge_of(config, env, alone=alone, page=request)
    if isinstance(way, str):
        raise UserError(way)
    if way is None or not config.passphrase:
        return None
    try:
        connected = way.connect()
    except bridge.Unreachable as error:
        log_line(f"{error}: {alone}")
        return None
    if isinstance(connected, str):
        raise UserError(connected)
    connection, reader = connected
    stop = threading.Event()
    log: threading.Thread | None = None
    try:
        try:
            url, handoff = read_page_answer(reader.readline())
        except HelloError as error:
            # The line the memory process logged too: said once, as the error.
            raise UserError(str(error)) from None
        # From here the process's log lines show here, as they show in a host's log.
        log = threading.Thread(target=way.follow_log, args=(stop,), name="squirrel-mcp-log", daemon=True)
        log.start()
        announce(url)
        if handoff is not None:
            open_browser_at(handoff)
        try:
            # Until Ctrl-C; the memory process says nothing more unless it ends.
            reader.read()
        except KeyboardInterrupt:
            # The end told, and waited for: the page has stopped (its hand-off file deleted, and
            # the store closed when no host is left and no idle time set) before this command ends.
            connection.shutdown(socket.SHUT_WR)
            connection.settimeout(PAGE_END_WAIT)
            with contextlib.suppress(OSError):
                reader.read()
            return 0
        raise UserError("the vault's memory process ended: the page has stopped")
    finally:
        stop.set()
        if log is not None:
            log.join(1.0)  # the lines written until the page stopped
        reader.close()
        connection.close()
