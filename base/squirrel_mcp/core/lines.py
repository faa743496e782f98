"""What squirrel-mcp writes on stderr: one line at a time, never memory text, a query or a secret.

Every command and the server report what a person can fix as one line,
"PROGRAM: MESSAGE" (`log_line`); the few lines the docs spell out word for word,
such as "memory: local embeddings ready", are written as given (`notice_line`).
"""

from __future__ import annotations

import sys

PROGRAM = "squirrel-mcp"


def log_line(message: str, program: str = PROGRAM) -> None:
    """One line on stderr, "PROGRAM: MESSAGE"."""
    print(f"{program}: {message}", file=sys.stderr, flush=True)


def notice_line(message: str) -> None:
    """One line on stderr exactly as given: for the lines the docs spell out ("memory: ...")."""
    print(message, file=sys.stderr, flush=True)
