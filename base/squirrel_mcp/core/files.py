"""Writing files the way private data must be written: atomically, owner-only."""

from __future__ import annotations

import glob
import os
import stat
import tempfile
import time
from pathlib import Path

# A temp file this old was left by a writer that died mid-write (kill -9, power loss):
# no write of ours takes minutes. Younger ones may belong to another live process
# (two servers on one vault write the same vector file), so they are left alone.
STALE_TEMP_SECONDS = 600.0
# What names our temp files: ".<target name>.squirrel-mcp-<random>.tmp". The sweep below
# deletes only names with this marker, so another program's ".<name>.<anything>.tmp"
# beside the target (an editor's, a sync tool's) is never touched.
TEMP_MARKER = "squirrel-mcp-"


def _is_our_leftover(temp: Path, cutoff: float) -> bool:
    """Whether `temp` looks exactly like a file `atomic_write` made and never renamed.

    mkstemp makes a regular file of mode 0600 owned by us with one link; a file that
    is anything else (a symlink, someone else's, chmod-ed, hard-linked elsewhere) was
    not left by us as it is, so it stays, however old.
    """
    status = temp.lstat()
    return (
        stat.S_ISREG(status.st_mode)
        and status.st_uid == os.geteuid()
        and stat.S_IMODE(status.st_mode) == 0o600
        and status.st_nlink == 1
        and status.st_mtime < cutoff
    )


def remove_stale_temps(path: Path) -> int:
    """Delete the temp files `atomic_write(path, ...)` left behind over STALE_TEMP_SECONDS ago.

    Returns how many went. A killed writer leaves its temp file (sealed data, mode
    0600) beside the target; without this they would pile up, one per crash (the
    vector file is rewritten every few saves, so a server killed often leaves many).
    Only files named with TEMP_MARKER and still as mkstemp made them are removed.
    """
    cutoff = time.time() - STALE_TEMP_SECONDS
    removed = 0
    for temp in path.parent.glob(f".{glob.escape(path.name)}.{TEMP_MARKER}*.tmp"):
        try:
            if _is_our_leftover(temp, cutoff):
                temp.unlink()
                removed += 1
        except FileNotFoundError:
            # Another process cleaned it up (or renamed it into place) meanwhile.
            continue
    return removed


def private_dirs(directory: Path) -> None:
    """Create `directory` and every missing directory above it with mode 0700.

    `Path.mkdir(mode=0o700, parents=True)` gives only the last one that mode; the
    ones above it (say ~/.local/share on a fresh account) would get the umask's.
    """
    missing = []
    while not directory.exists():
        missing.append(directory)
        directory = directory.parent
    for path in reversed(missing):
        path.mkdir(mode=0o700, exist_ok=True)


def create_private_file(path: Path) -> None:
    """Create an empty file with mode 0600 (its missing directories 0700) if it is absent."""
    private_dirs(path.parent)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return
    os.close(fd)


def atomic_write(path: Path, data: bytes | bytearray) -> None:
    """Replace `path` with `data`: temp file (mode 0600), fsync, rename, fsync the directory.

    A reader (or a crash) sees the old file or the new one, never half of either.
    The directory is created owner-only if it is missing; temp files that earlier
    writers killed mid-write left beside `path` are removed once stale.
    """
    private_dirs(path.parent)
    remove_stale_temps(path)
    # mkstemp creates the file with mode 0600 whatever the umask.
    fd, temp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{TEMP_MARKER}", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as temp:
            temp.write(data)
            temp.flush()
            os.fsync(temp.fileno())
        os.replace(temp_name, path)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
