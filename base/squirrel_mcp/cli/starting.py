"""How a bridge starts its vault's memory process, and reads that process's log.

The memory process holds the passphrase and every decrypted memory for every host,
so nothing of the folder a host happens to run in may reach it. It is started as
`python -P -m squirrel_mcp.cli.memory_process` (`-P`: the current directory is not
put first on `sys.path`, so a project's `json.py`, `random.py` or a plugin's
`*.dist-info` is never imported) in the channel's own directory, which only the
user can enter; and every path setting it reads is made absolute first, from the
host's folder, so a relative one means there what it means to a server of its own.

Its stderr is the channel's log, `NAME.log` (0600). The next start past MAX_LOG
keeps it as `NAME.log.1` (one previous generation: the lines of the process before,
its crash traceback among them, stay there) and begins a new one. A bridge copies
the lines written since it connected to its host's stderr (`ProcessLog.unread`),
across such a start.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # Imported where a bridge starts the memory process only: a bridge stays small.
    import subprocess

    from squirrel_mcp.core.channel import Channel

# The log is kept as NAME.log.1 by the next process started past this size.
MAX_LOG = 1024 * 1024
# Path settings a memory process reads whose readers expand a leading `~` (core.config).
EXPANDED = ("SQUIRREL_VAULT", "SQUIRREL_MEMORY_CACHE_DIR")
# The XDG base directories squirrel-mcp and its libraries read. The XDG spec calls a relative
# one invalid; core.config ignores it, platformdirs would read it from the current directory.
XDG_DIRECTORIES = ("XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR")
# How much of the log's end is read for its last line, and how much of that line is quoted.
TAIL = 4096
QUOTED = 200


class Unreachable(Exception):
    """No memory process could be reached or started: the reason, one line.

    `quoted`: the last line of the memory process's log, for the host's log only (its
    string has it), never for a tool's answer (`reason` has not).
    """

    def __init__(self, reason: str, quoted: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.quoted = quoted

    def __str__(self) -> str:
        """The reason, and the log's last line when there is one."""
        return f'{self.reason}; the last line of its log: "{self.quoted}"' if self.quoted else self.reason


def is_path_setting(name: str) -> bool:
    """True for a variable naming a path the memory process reads from its own folder if relative.

    SQUIRREL_VAULT and every SQUIRREL_*_DIR (the cache directory, a plugin's model
    directory), and HOME (the default paths are under it).
    """
    return name in ("SQUIRREL_VAULT", "HOME") or (name.startswith("SQUIRREL_") and name.endswith("_DIR"))


def absolute_paths(env: Mapping[str, str]) -> dict[str, str]:
    """`env` as a memory process started outside this process's folder must be given it.

    Each path setting (`is_path_setting`) that is relative is joined to the current
    directory, after expanding `~` where its reader does; a relative XDG base
    directory, which every reader ignores or should, is left out. OSError when the
    current directory is gone and a relative path needs it.
    """
    resolved = dict(env)
    for name, value in env.items():
        if name in XDG_DIRECTORIES and value and not os.path.isabs(value):
            del resolved[name]
        elif is_path_setting(name) and value:
            path = os.path.expanduser(value) if name in EXPANDED else value
            resolved[name] = path if os.path.isabs(path) else os.path.join(os.getcwd(), path)
    return resolved


def _open_or_none(path: Path) -> int | None:
    try:
        return os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None


def _read_from(descriptor: int, offset: int) -> bytes:
    """The complete lines of the open file from `offset` on."""
    os.lseek(descriptor, offset, os.SEEK_SET)
    chunks = []
    while chunk := os.read(descriptor, 1024 * 1024):
        chunks.append(chunk)
    written = b"".join(chunks)
    return written[: written.rfind(b"\n") + 1]


class ProcessLog:
    """The channel's log as a bridge reads it: what its host has been shown, across a new generation."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.previous = path.with_name(f"{path.name}.1")
        # The file (inode) the host was being shown and how far: None until `mark`.
        self.seen: tuple[int, int] | None = None

    def mark(self) -> None:
        """From now on `unread` gives the lines written after this moment (once: later calls keep it)."""
        if self.seen is None:
            try:
                info = self.path.stat()
                self.seen = (info.st_ino, info.st_size)
            except FileNotFoundError:
                self.seen = (0, 0)

    def unread(self) -> bytes:
        """The complete lines written since the last call (or `mark`), a previous generation's rest first."""
        if self.seen is None:
            return b""
        inode, offset = self.seen
        current = _open_or_none(self.path)
        if current is None:
            return b""
        try:
            info = os.fstat(current)
            earlier = b""
            if info.st_ino != inode:
                # A start kept the generation this host was reading as NAME.log.1: its last lines first.
                earlier = self._rest_of_previous(inode, offset)
                inode, offset = info.st_ino, 0
            elif info.st_size < offset:
                offset = 0  # emptied by another hand: read from its beginning
            written = _read_from(current, offset)
        finally:
            os.close(current)
        self.seen = (inode, offset + len(written))
        return earlier + written

    def _rest_of_previous(self, inode: int, offset: int) -> bytes:
        """NAME.log.1's complete lines from `offset` when it is the file `inode`; else nothing."""
        previous = _open_or_none(self.previous)
        if previous is None:
            return b""
        try:
            return _read_from(previous, offset) if os.fstat(previous).st_ino == inode else b""
        finally:
            os.close(previous)

    def start(self) -> int:
        """The log opened for a new process's stderr (the caller closes it), after keeping a large one.

        Past MAX_LOG, NAME.log becomes NAME.log.1 (replacing the one before) and a new one begins.
        """
        with contextlib.suppress(FileNotFoundError):
            if self.path.stat().st_size > MAX_LOG:
                os.replace(self.path, self.previous)
                os.chmod(self.previous, 0o600)
        return os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)

    def last_line(self, since: int) -> str:
        """NAME.log's last line written at or after `since`, printable, at most QUOTED long; "" if none.

        The log holds no memory text, query or secret by design; still, only its last
        line is ever quoted, bounded, with control characters replaced.
        """
        descriptor = _open_or_none(self.path)
        if descriptor is None:
            return ""
        with os.fdopen(descriptor, "rb") as log:
            end = log.seek(0, os.SEEK_END)
            log.seek(max(since, end - TAIL))
            tail = log.read(TAIL)
        lines = [line for line in tail.decode("utf-8", errors="replace").splitlines() if line.strip()]
        if not lines:
            return ""
        line = re.sub(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]", "?", lines[-1].strip())
        return line if len(line) <= QUOTED else line[: QUOTED - 1] + "…"


def start_process(
    channel: Channel, log: ProcessLog, env: dict[str, str]
) -> tuple[subprocess.Popen[bytes], int]:
    """A memory process started with `env`, in the channel's directory; and where its log lines begin.

    `env` is the bridge's, its paths absolute (`absolute_paths`): the passphrase comes
    from the host's config or the keychain, never a command line.
    """
    import subprocess

    descriptor = log.start()
    try:
        begins = os.fstat(descriptor).st_size
        child = subprocess.Popen(
            [sys.executable, "-P", "-m", "squirrel_mcp.cli.memory_process"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=descriptor,
            cwd=channel.directory,
            env=env,
            start_new_session=True,
            close_fds=True,
        )
    finally:
        os.close(descriptor)
    # Reaped when it ends, so that it leaves no zombie behind while this bridge runs.
    threading.Thread(target=child.wait, name="squirrel-mcp-reap", daemon=True).start()
    return child, begins
