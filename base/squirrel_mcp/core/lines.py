"""What squirrel-mcp writes on stderr: one line at a time, never memory text, a query or a secret.

Every command and the server report what a person can fix as one line,
"PROGRAM: MESSAGE" (`log_line`); the few lines the docs spell out word for word,
such as "memory: local embeddings ready", are written as given (`notice_line`).

The memory process's stderr is a log file that every host of the vault shows:
there (`shared_log`) the records of the libraries' loggers (asyncio's, uvicorn's,
the MCP SDK's) become such lines too, without their values or tracebacks; a line
written again within REPEAT_INTERVAL is left out and counted, and no more than
MOST_LINES lines are written in one interval. A flood of one failure (connections
refused, say) so leaves a line a minute, not megabytes.
"""

from __future__ import annotations

import logging
import sys
import threading
import time

PROGRAM = "squirrel-mcp"
# Seconds within which a line the same as one written is left out (and counted).
REPEAT_INTERVAL = 60.0
# Lines written at most in one REPEAT_INTERVAL, whatever they say (far more than a process
# says in a minute: an open naming each damaged memory of a large vault stays whole).
MOST_LINES = 1000
# The characters of a logger's message kept: a library's message may carry a long value.
LONGEST_RECORD = 300
# How many different lines are remembered before the ones older than REPEAT_INTERVAL are forgotten.
REMEMBERED = 1000


class Repeats:
    """Which lines are written: each line once per `interval`, and `most` in any one interval."""

    def __init__(self, interval: float = REPEAT_INTERVAL, most: int = MOST_LINES) -> None:
        self.interval = interval
        self.most = most
        self._lock = threading.Lock()
        # When each line was last written, and how many like it were left out since.
        self._written: dict[str, float] = {}
        self._left_out: dict[str, int] = {}
        self._window_start = float("-inf")
        self._in_window = 0
        self._over_most = 0

    def admit(self, line: str) -> list[str]:
        """The lines to write for `line`: none when it is left out; else it, with what was left out."""
        with self._lock:
            now = time.monotonic()
            if now - self._window_start >= self.interval:
                self._window_start, self._in_window = now, 0
            last = self._written.get(line)
            if last is not None and now - last < self.interval:
                self._left_out[line] = self._left_out.get(line, 0) + 1
                return []
            if self._in_window >= self.most:
                self._over_most += 1
                return []
            self._in_window += 1
            if len(self._written) >= REMEMBERED:
                self._forget(now)
            self._written[line] = now
            written = []
            if self._over_most:
                over = f"over {self.most} in {self.interval:g} s"
                written.append(f"{PROGRAM}: {self._over_most} log line(s) were left out ({over})")
                self._over_most = 0
            same = self._left_out.pop(line, 0)
            written.append(line if not same else f"{line} ({same} more like it were left out)")
            return written

    def _forget(self, now: float) -> None:
        for line, when in list(self._written.items()):
            if now - when >= self.interval:
                del self._written[line]
                self._left_out.pop(line, None)


# Set in the memory process (`shared_log`); None: every line is written.
_repeats: Repeats | None = None


def _write(line: str) -> None:
    for each in [line] if _repeats is None else _repeats.admit(line):
        print(each, file=sys.stderr, flush=True)


def log_line(message: str, program: str = PROGRAM) -> None:
    """One line on stderr, "PROGRAM: MESSAGE"."""
    _write(f"{program}: {message}")


def notice_line(message: str) -> None:
    """One line on stderr exactly as given: for the lines the docs spell out ("memory: ...")."""
    _write(message)


class RecordLines(logging.Handler):
    """A logger's record as one line: the logger's name, its message's first line, the exception's type.

    The exception's value and traceback are left out: either may hold what a host sent.
    """

    def emit(self, record: logging.LogRecord) -> None:
        """Write the record's line (through the repeats' limit, when set)."""
        try:
            message = record.getMessage().split("\n", 1)[0][:LONGEST_RECORD]
            if record.exc_info and record.exc_info[0] is not None:
                message += f" ({record.exc_info[0].__name__})"
        except Exception as error:
            # Not logging's handleError, which prints the record's arguments.
            message = f"a record could not be written ({type(error).__name__})"
        log_line(f"{record.name}: {message}")


def shared_log(*, limit: bool = True) -> None:
    """From now on in this process, stderr is a log: every logger's record is one line.

    Records of level WARNING and above, as Python writes them when nothing is configured;
    any handler configured before is replaced. With `limit`, repeated lines are left out
    and at most MOST_LINES written in a REPEAT_INTERVAL.
    """
    global _repeats
    _repeats = Repeats() if limit else None
    logging.getLogger().handlers[:] = [RecordLines(logging.WARNING)]
