"""How `squirrel-mcp hook` asks the vault's memory process for its text (squirrel_mcp.cli.hook).

Its hello names the vault, the version, the session's project and the request, and no
passphrase: a running memory process answers a hook of this user's without one. When none
runs, the hook starts one as a host's bridge does, but only with a passphrase to unlock it
(SQUIRREL_PASSPHRASE, or the keychain's entry), so a hook never starts a process that could
not open the vault.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO, TYPE_CHECKING

from squirrel_mcp.core.hello import MAX_HOOK_PROMPT

if TYPE_CHECKING:
    import socket

    from squirrel_mcp.cli.bridge import Bridge
    from squirrel_mcp.core.channel import Channel
    from squirrel_mcp.core.config import Config
    from squirrel_mcp.core.hello import Hello


class Silent(Exception):
    """Nothing is printed on stdout: this one line is said on stderr instead."""


NOTHING = "nothing was added"


def ask(env: dict[str, str], cwd: Path, event: str, budget: int, prompt: str | None) -> str | None:
    """The memory process's text for `event` in the project of `cwd`; None: nothing; Silent: why not."""
    from squirrel_mcp.core.channel import Channel, ChannelError, supported
    from squirrel_mcp.core.config import Config, ConfigError
    from squirrel_mcp.core.hello import Hello, HookRequest, identity, settings
    from squirrel_mcp.core.projects import ProjectError, session_project

    if not supported():
        raise Silent(f"no local channel to the memory process can be made on this system; {NOTHING}")
    try:
        project = session_project(env, cwd)
    except ProjectError as error:
        raise Silent(f"the session's project: {error}; {NOTHING}") from None
    except OSError as error:
        raise Silent(f"the session's folder cannot be read ({type(error).__name__}); {NOTHING}") from None
    config = Config.from_env(env)
    try:
        config.check()
        served = identity(config)
        channel = Channel.of(served, env)
    except (ConfigError, ChannelError) as error:
        raise Silent(f"{error}; {NOTHING}") from None
    except OSError as error:
        raise Silent(f"the vault's channel cannot be found ({type(error).__name__}); {NOTHING}") from None
    request = HookRequest(event, budget, None if prompt is None else prompt[:MAX_HOOK_PROMPT])
    hello = Hello(served, settings(config, env), None, project=project, hook=request)
    connected = _running(channel, hello)
    if connected is None:
        from squirrel_mcp.cli.bridge import Bridge

        connected = _started(Bridge(channel, hello, env), config)
    if isinstance(connected, str):
        raise Silent(f"{connected}; {NOTHING}")
    return _answer(*connected, budget)


def _running(channel: Channel, hello: Hello) -> tuple[socket.socket, IO[bytes]] | str | None:
    """The running memory process, which took the hook (the connection) or refused it (the line); None: none.

    As a bridge's first try (cli.bridge's `Bridge.ask`), without importing the bridge: the
    warm path of every prompt stays small.
    """
    from squirrel_mcp.core.hello import ChannelFailure, greet

    try:
        return greet(channel, hello)
    except ChannelFailure as failure:
        raise Silent(f"{failure}; {NOTHING}") from None


def _started(bridge: Bridge, config: Config) -> tuple[socket.socket, IO[bytes]] | str:
    """A memory process started for this hook and connected; Silent without a passphrase to start one."""
    from squirrel_mcp.cli.bridge import Unreachable
    from squirrel_mcp.cli.starting import absolute_paths

    if not config.remote and not config.vault_path.exists():
        # A memory process's first start makes the vault: a hook never does (`squirrel-mcp init` does).
        raise Silent(f"no vault at {config.vault_path} (SQUIRREL_VAULT in the host's environment); {NOTHING}")
    if not _unlockable(config):
        raise Silent(
            "no memory process runs for this vault, and neither SQUIRREL_PASSPHRASE nor the keychain "
            f"holds the passphrase to start one (`squirrel-mcp keychain store` keeps it there); {NOTHING}"
        )
    try:
        # The memory process runs in the channel's directory: a relative path means there the host's folder.
        bridge.env = absolute_paths(bridge.env)
        return bridge.connect()
    except Unreachable as error:
        raise Silent(f"{error.reason}; {NOTHING}") from None
    except OSError as error:
        raise Silent(f"the memory process could not be started ({type(error).__name__}); {NOTHING}") from None


def _unlockable(config: Config) -> bool:
    """Whether a memory process started with this hook's environment finds its secrets (as it reads them).

    A local vault's passphrase is looked up in the keychain here directly: the unlock's module,
    which a sync account's keys need, brings pydantic and the vault's code (a quarter of a
    second before the process could start). The secret itself is not kept: the process reads it.
    """
    if not config.lacks_secret:
        return True
    if config.remote:
        from squirrel_mcp.cli.unlock import from_keychain

        return not from_keychain(config).lacks_secret
    from squirrel_mcp.core import keychain

    try:
        return bool(keychain.read(keychain.vault_passphrase_entry(config.vault_path)))
    except keychain.KeychainError:
        return False


def _answer(connection: socket.socket, reader: IO[bytes], budget: int) -> str | None:
    """The process's one line after taking the hook: its text, or Silent with why it has none."""
    from squirrel_mcp.core.hello import HelloError, read_hook_answer

    try:
        # The answer is at most a budget's characters, each at most 12 bytes JSON-escaped.
        line = reader.readline(12 * budget + 4096)
    except OSError as error:
        raise Silent(f"the memory process did not answer ({type(error).__name__}); {NOTHING}") from None
    finally:
        reader.close()
        connection.close()
    try:
        return read_hook_answer(line)
    except HelloError as error:
        raise Silent(f"{error}; {NOTHING}") from None
