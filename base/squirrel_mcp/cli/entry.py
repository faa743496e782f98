"""The `squirrel-mcp` script's entry point: a host's bridge starts without the rest of the command line.

With no command (and SQUIRREL_MCP_SHARED not 0), the process is most likely a bridge
to the vault's memory process: it relays without importing the parser, the
plugins or the MCP SDK (a bridge is a few MB, not a server's tens). Anything
else, or a bridge that was refused or found no channel, goes on to
`squirrel_mcp.cli.main`. `squirrel-mcp hook`, which an agent's host runs at every
prompt, starts as small (squirrel_mcp.cli.hook).
"""

from __future__ import annotations

import os
import sys


def main() -> int:
    """Entry point of the `squirrel-mcp` script and of `python -m squirrel_mcp`."""
    arguments = sys.argv[1:]
    if arguments[:1] == ["hook"]:
        # An agent's host runs it at every prompt: it starts without the parser, pydantic or the SDK.
        from squirrel_mcp.cli.hook import main as hook

        return hook(arguments[1:])
    if arguments in ([], ["serve"]) and os.environ.get("SQUIRREL_MCP_SHARED") != "0":
        from squirrel_mcp.cli.bridge import RELAYED
        from squirrel_mcp.cli.bridging import bridged
        from squirrel_mcp.core.config import Config

        config = Config.from_env()
        # A person at a terminal without the passphrase is asked for it by a server of its own.
        if config.passphrase or not sys.stdin.isatty():
            outcome = bridged(config, dict(os.environ))
            if outcome == RELAYED:
                return 0
            from squirrel_mcp.cli import main as command_line

            return command_line.main(bridged=outcome)
    from squirrel_mcp.cli import main as command_line

    return command_line.main()
