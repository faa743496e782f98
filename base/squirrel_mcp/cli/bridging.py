"""How a host's `squirrel-mcp` comes to its vault's memory process: the bridge it is, or why not.

`bridge_of` works out the way (the sharing's settings, the vault's channel, the session's
project, the hello); `bridged` relays a host's session over it (squirrel_mcp.cli.bridge).
"""

from __future__ import annotations

from pathlib import Path

from squirrel_mcp.cli.bridge import RELAYED, Bridge, run
from squirrel_mcp.cli.starting import Unreachable, absolute_paths
from squirrel_mcp.core.channel import Channel, ChannelError, supported
from squirrel_mcp.core.config import Config, ConfigError
from squirrel_mcp.core.hello import IDLE_VARIABLE, Hello, PageRequest, identity, idle_seconds, settings
from squirrel_mcp.core.lines import log_line
from squirrel_mcp.core.projects import ProjectError, session_project


def bridge_of(
    config: Config, env: dict[str, str], *, alone: str, page: PageRequest | None = None
) -> Bridge | str | None:
    """The way to the vault's memory process, or a line saying a setting of the sharing is wrong.

    None: this process does without, as where SQUIRREL_MCP_SHARED=0, or where no local
    channel can be made (it says so in one line, ending `alone`). `page`: the hello of
    `squirrel-mcp ui`.
    """
    shared = env.get("SQUIRREL_MCP_SHARED") or "1"
    if shared not in ("0", "1"):
        return "SQUIRREL_MCP_SHARED must be 1 (one memory process for every host) or 0 (one per host)"
    if shared == "0":
        return None
    try:
        idle_seconds(env.get(IDLE_VARIABLE))
    except ValueError:
        return "SQUIRREL_MCP_SHARED_IDLE must be a number of seconds, 0 or more"
    if not supported():
        log_line(f"no local channel can be made on this system: {alone}")
        return None
    if config.lacks_secret:
        from squirrel_mcp.cli.unlock import from_keychain

        config = from_keychain(config)
    try:
        # A host's session is in the project of the folder it was started in; the page is in none.
        project = None if page is not None else session_project(env, Path.cwd())
    except ProjectError as error:
        return str(error)
    except OSError as error:
        log_line(f"the current directory cannot be read ({type(error).__name__}): {alone}")
        return None
    try:
        config.check()
        served = identity(config)
        channel = Channel.of(served, env)
        # The memory process runs in the channel's directory: a relative path means there the host's folder.
        env = absolute_paths(env)
    except ConfigError:
        return None  # the command on its own says what is wrong, as always
    except ChannelError as error:
        log_line(f"{error}: {alone}")
        return None
    except OSError as error:
        log_line(f"the current directory cannot be read ({type(error).__name__}): {alone}")
        return None
    hello = Hello(served, settings(config, env), config.passphrase, page, project=project)
    return Bridge(channel, hello, env)


def bridged(config: Config, env: dict[str, str]) -> str | None:
    """The session relayed to the vault's memory process (RELAYED): what a host's server does.

    Otherwise the line this host was refused with (or why the sharing's settings are
    wrong), or None: this process serves on its own (`bridge_of`).
    """
    alone = "this host's server runs on its own"
    bridge = bridge_of(config, env, alone=alone)
    if not isinstance(bridge, Bridge):
        return bridge
    try:
        refused = run(bridge)
    except Unreachable as error:
        log_line(f"{error}: {alone}")
        return None
    return RELAYED if refused is None else refused
