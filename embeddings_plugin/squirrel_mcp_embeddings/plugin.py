"""The squirrel-mcp plugin: search by meaning, and the `squirrel-mcp diagnose` command.

Registered as the entry point `embeddings` of the group `squirrel_mcp`: `plugin`, the
one EmbeddingsPlugin. Its hooks are hooks.py's (`startup`, `memories_changed`,
`rank_memories`, `shutdown`, `doctor_checks`: the model, the vectors and warmup.py's
warm-up, ranker.py's ranking) and `register_commands`, which adds `squirrel-mcp diagnose`.

The command's help and arguments are command.py's; diagnose.py, which runs it, is
imported only then. diagnose.py starts hooks.py's hooks and never imports this
module, so no import goes round in a circle.
"""

from __future__ import annotations

import argparse

from squirrel_mcp.plugin_api import hookimpl
from squirrel_mcp_embeddings.command import DIAGNOSE_HELP, add_diagnose_arguments
from squirrel_mcp_embeddings.hooks import EmbeddingsHooks


class EmbeddingsPlugin(EmbeddingsHooks):
    """The hook implementations; one instance, `plugin`, is the registered entry point."""

    @hookimpl
    def register_commands(self, commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
        """`squirrel-mcp diagnose queries.json`: the recall diagnostic, wherever squirrel-mcp is."""
        command = commands.add_parser("diagnose", help=DIAGNOSE_HELP, description=DIAGNOSE_HELP)
        add_diagnose_arguments(command)
        # The name it runs as (`squirrel-mcp diagnose`), for its errors.
        command.set_defaults(run=run_diagnose, diagnose_prog=command.prog)


def run_diagnose(args: argparse.Namespace) -> int:
    """Run the diagnostic on the parsed `squirrel-mcp diagnose` arguments (it ends the process)."""
    # Imported here: it imports the server, which the other commands do not need.
    from squirrel_mcp_embeddings import diagnose

    diagnose.main([str(args.queries)], prog=args.diagnose_prog)


plugin = EmbeddingsPlugin()
