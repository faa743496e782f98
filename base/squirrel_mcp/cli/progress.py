"""A progress bar on stderr for the commands' long runs, drawn only on a terminal.

`import` and `export` can take a while on a large vault or a distant sync server.
When their stderr is a terminal and a run has lasted DELAY seconds, they draw one
line that rewrites itself, and erase it when done:

    squirrel-mcp: importing [############------------------]  1,500/3,000 memories

It shows counts only, never memory text. Nothing is drawn when stderr is a file
or a pipe (a script, a log), and the server never draws one: its stderr is the
MCP host's log.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import TextIO

from squirrel_mcp.core.lines import PROGRAM

# A run shorter than this draws nothing; after it, at most one redraw per INTERVAL.
DELAY = 0.5
INTERVAL = 0.1
WIDTH = 30


class ProgressBar:
    """A callable `(done, total)` that draws the bar on `stream` (stderr) when it is a terminal."""

    def __init__(self, doing: str, unit: str, stream: TextIO | None = None) -> None:
        """`doing` names the work ("importing"), `unit` what is counted ("memories")."""
        self._stream = sys.stderr if stream is None else stream
        self._doing = doing
        self._unit = unit
        self._enabled = self._stream.isatty()
        self._started = time.monotonic()
        self._drawn_at: float | None = None

    def __call__(self, done: int, total: int) -> None:
        """Show that `done` of `total` are done (redrawn at most every INTERVAL, the last always)."""
        if not self._enabled or total <= 0:
            return
        now = time.monotonic()
        if now - self._started < DELAY:
            return
        if self._drawn_at is not None and now - self._drawn_at < INTERVAL and done < total:
            return
        filled = WIDTH * min(done, total) // total
        bar = "#" * filled + "-" * (WIDTH - filled)
        # Erased to the end of the line: another bar may have drawn a longer one before.
        self._stream.write(f"\r{PROGRAM}: {self._doing} [{bar}] {done:,}/{total:,} {self._unit}\x1b[K")
        self._stream.flush()
        self._drawn_at = now

    def close(self) -> None:
        """Erase the bar, if one was drawn, so what follows starts on a clean line."""
        if self._drawn_at is not None:
            self._stream.write("\r\x1b[2K")
            self._stream.flush()
            self._drawn_at = None

    def __enter__(self) -> ProgressBar:
        """The bar itself; `close` runs on leaving the block, error or not."""
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Erase the bar."""
        self.close()
