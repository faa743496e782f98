"""The `diagnose` command's help and arguments: `squirrel-mcp diagnose` and `squirrel-mcp-diagnose` alike.

Apart from plugin.py, which registers the command (and imports diagnose.py only
when it runs), and from diagnose.py, which runs it: both import this module, and
diagnose.py imports the hooks it starts from hooks.py, never plugin.py, so no
import of the plugin goes round in a circle.
"""

from __future__ import annotations

import argparse
from pathlib import Path

DIAGNOSE_HELP = (
    "For queries you choose, where the memory you expected ranks "
    "(prints ids, ranks and scores only, never memory text)."
)


def add_diagnose_arguments(parser: argparse.ArgumentParser) -> None:
    """The diagnostic's arguments, on `squirrel-mcp diagnose` and on `squirrel-mcp-diagnose`."""
    parser.add_argument("queries", type=Path, help='a JSON list of {"query": ..., "expect": ...}')
