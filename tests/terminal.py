"""A command run on a pseudo-terminal, as a person at a terminal runs it: prompts answered as they show."""

from __future__ import annotations

import os
import pty
import select
import signal
import sys
import time
from collections.abc import Callable

# Given everything the command printed so far, the line to type next (None: nothing yet).
Answerer = Callable[[bytes], str | None]


def converse(
    argv: list[str], env: dict[str, str], answer: Answerer, within: float = 60, cwd: str | None = None
) -> tuple[int, str]:
    """Run `python ARGV` on a pseudo-terminal with `env` (in `cwd`); its exit code and everything it printed.

    After each read, `answer` is asked what to type; a command still running after `within`
    seconds is killed.
    """
    pid, fd = pty.fork()
    if pid == 0:  # the child: becomes the command, its terminal is the pty
        if cwd is not None:
            os.chdir(cwd)
        os.execve(sys.executable, [sys.executable, *argv], {"PATH": os.environ["PATH"], **env})
    output = b""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        output += chunk
        line = answer(output)
        if line is not None:
            os.write(fd, line.encode() + b"\n")
    else:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), output.decode(errors="replace")
