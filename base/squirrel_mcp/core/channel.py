"""The local channel between the hosts' bridges and a vault's one memory process.

One memory process serves a vault (or a sync account) for every MCP host on the
machine; each host runs `squirrel-mcp`, which relays its session over this
channel. On Linux and macOS the channel is a Unix socket in a directory only
the user can enter: `$XDG_RUNTIME_DIR/squirrel-mcp` when the user's runtime
directory is usable, else `squirrel-mcp-<uid>` in the temporary directory. The
directory is refused unless it is the user's own, a real directory and closed
to everyone else. Each end checks the other's user id on every connection
(SO_PEERCRED on Linux, LOCAL_PEERCRED on macOS and the BSDs).

Beside the socket are a lock file (held by the memory process for as long as
it serves, so a second one never starts beside it) and the memory process's
log. Their names are a digest of the vault's identity: the full path of a
local vault, or the sync server's URL with a digest of the API key.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import stat
import struct
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

# The longest socket path every system takes (sun_path holds 104 bytes on macOS, 108 on Linux).
MAX_SOCKET_PATH = 100
# How long one connection attempt may take, in seconds (a socket on this machine answers at once).
CONNECT_TIMEOUT = 5.0


class ChannelError(Exception):
    """No local channel can be made here: the reason, one line (the server then runs on its own)."""


class PeerRefused(Exception):
    """The other end of a connection is not this user."""


def _sha256_hex(data: bytes) -> str:
    """SHA-256 of `data`, hex, from CPython's own module where it has one.

    hashlib loads OpenSSL, about 4 MB of every bridge's memory for this one digest; the
    built-in module gives the same digest (and hashlib is the fallback elsewhere).
    """
    try:
        from _sha2 import sha256  # type: ignore[import-not-found]  # CPython 3.12 and later
    except ImportError:
        try:
            from _sha256 import sha256  # type: ignore[import-not-found]  # CPython 3.11
        except ImportError:
            from hashlib import sha256
    return str(sha256(data).hexdigest())


def supported() -> bool:
    """True where the channel can be made: Unix sockets with a peer credential check."""
    return hasattr(socket, "AF_UNIX") and (sys.platform.startswith("linux") or sys.platform == "darwin")


def _own_private_directory(path: Path, *, create: bool) -> Path:
    """`path`, a directory of this user's that no one else may enter (made so when `create`)."""
    if create:
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=0o700)
    try:
        info = os.lstat(path)
    except OSError:
        raise ChannelError(f"the channel's directory {path} does not exist") from None
    if not stat.S_ISDIR(info.st_mode):
        raise ChannelError(f"the channel's directory {path} is not a directory (a link, or a file)")
    if info.st_uid != os.geteuid():
        raise ChannelError(f"the channel's directory {path} belongs to another user")
    if info.st_mode & 0o077:
        mode = f"{info.st_mode & 0o777:o}"
        raise ChannelError(f"the channel's directory {path} is open to other users (mode {mode})")
    return path


def user_runtime_dir(env: Mapping[str, str] | None = None) -> Path | None:
    """`XDG_RUNTIME_DIR` if it names a directory of this user's that others cannot enter; else None."""
    value = (os.environ if env is None else env).get("XDG_RUNTIME_DIR", "")
    if sys.platform == "win32" or not value or not os.path.isabs(value):
        return None
    try:
        return _own_private_directory(Path(value), create=False)
    except ChannelError:
        return None


def runtime_directory(env: Mapping[str, str] | None = None, *, longest: int | None = None) -> Path:
    """The directory of this user's channels; ChannelError when none is safe to use.

    The user's runtime directory when it is usable and its path no longer than `longest`
    bytes (a socket's path has a limit), else the temporary directory's.
    """
    user_runtime = user_runtime_dir(env)
    if user_runtime is not None and (longest is None or len(os.fsencode(user_runtime)) <= longest):
        try:
            return _own_private_directory(user_runtime / "squirrel-mcp", create=True)
        except (ChannelError, OSError):
            pass  # unusable: the temporary directory's, as where none is set
    import tempfile  # here only: most machines have a runtime directory, and a bridge stays small

    try:
        shared_temporary = Path(tempfile.gettempdir()) / f"squirrel-mcp-{os.getuid()}"
        return _own_private_directory(shared_temporary, create=True)
    except OSError as error:
        raise ChannelError(f"the channel's directory could not be made ({type(error).__name__})") from None


class Channel(NamedTuple):
    """The files of one vault's channel: the socket, the memory process's lock and its log."""

    directory: Path
    name: str

    @classmethod
    def of(cls, identity: str, env: Mapping[str, str] | None = None) -> Channel:
        """The channel of the vault or account `identity` names (see the module's docstring)."""
        name = _sha256_hex(identity.encode("utf-8"))[:24]
        # The socket's path is the directory's, "/squirrel-mcp/" and the name with ".sock".
        longest = MAX_SOCKET_PATH - len(f"/squirrel-mcp/{name}.sock")
        channel = cls(runtime_directory(env, longest=longest), name)
        if len(os.fsencode(channel.socket_path)) > MAX_SOCKET_PATH:
            raise ChannelError(
                f"the channel's directory {channel.directory} has too long a path for a socket"
            )
        return channel

    @property
    def socket_path(self) -> Path:
        """The socket the memory process listens on."""
        return self.directory / f"{self.name}.sock"

    @property
    def lock_path(self) -> Path:
        """The lock the memory process holds while it serves."""
        return self.directory / f"{self.name}.lock"

    @property
    def start_path(self) -> Path:
        """The lock a bridge holds while it starts the memory process (others wait for it)."""
        return self.directory / f"{self.name}.start"

    @property
    def log_path(self) -> Path:
        """Where the memory process writes its log lines."""
        return self.directory / f"{self.name}.log"

    def connect(self) -> socket.socket | None:
        """A connection to the memory process; None when none is listening. PeerRefused: not this user."""
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        connection.settimeout(CONNECT_TIMEOUT)
        try:
            connection.connect(str(self.socket_path))
        except OSError as error:
            connection.close()
            nobody_listens = error.errno in (errno.ENOENT, errno.ECONNREFUSED, errno.EAGAIN)
            if nobody_listens or isinstance(error, TimeoutError):
                return None
            raise
        try:
            check_peer(connection)
        except PeerRefused:
            connection.close()
            raise
        connection.settimeout(None)
        return connection

    def listen(self) -> socket.socket:
        """The listening socket (mode 0600), replacing a dead process's; hold the lock first."""
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_mask = os.umask(0o177)
        try:
            listener.bind(str(self.socket_path))
        finally:
            os.umask(old_mask)
        listener.listen(64)
        return listener


def peer_uid(connection: socket.socket) -> int:
    """The user id of the process at the other end of a Unix socket connection."""
    if sys.platform.startswith("linux"):
        credentials = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", credentials)
        return int(uid)
    # macOS and the BSDs: LOCAL_PEERCRED (SOL_LOCAL 0, option 1) gives a struct xucred whose
    # second field is the uid.
    credentials = connection.getsockopt(0, 1, 76)
    _version, uid = struct.unpack_from("Ii", credentials)
    return int(uid)


def check_peer(connection: socket.socket) -> None:
    """PeerRefused unless the other end runs as this user."""
    uid = peer_uid(connection)
    if uid != os.geteuid():
        raise PeerRefused(f"a connection from another user (uid {uid}) was refused")


def try_lock(path: Path) -> int | None:
    """The lock file `path` held by this process (its descriptor), or None when another holds it.

    The kernel releases it when the process ends, however it ends, so a killed
    memory process never leaves a vault locked.
    """
    import fcntl

    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        return None
    # Who holds it, for `squirrel-mcp doctor` and for a person looking (the lock is the flock).
    os.ftruncate(descriptor, 0)
    os.write(descriptor, f"{os.getpid()}\n".encode("ascii"))
    return descriptor


def holder(path: Path) -> int | None:
    """The process id written in the lock file `path` while its process held it; None if none."""
    try:
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None
