"""A memory process's connections, read and written a line at a time; and the vault's lock, waited for.

Split from squirrel_mcp.cli.memory_process, which serves the connections.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator

import anyio
from anyio.abc import SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream

from squirrel_mcp.core.channel import Channel, PeerRefused, try_lock

# What a connection raises once its bridge has gone.
CLOSED = (anyio.BrokenResourceError, anyio.ClosedResourceError)
# The longest message line a session reads (a save of a long memory is far below it).
MAX_LINE = 64 * 1024 * 1024
# How long a memory process started beside a running one waits for the vault's lock.
LOCK_WAIT = 120.0


def wait_for_lock(channel: Channel) -> int | None:
    """The vault's lock; None as soon as another memory process listens (or after LOCK_WAIT)."""
    deadline = time.monotonic() + LOCK_WAIT
    while time.monotonic() < deadline:
        lock = try_lock(channel.lock_path)
        if lock is not None:
            return lock
        # Another process holds it: one serving (then leave it the vault), or one ending.
        with contextlib.suppress(PeerRefused, OSError):
            connection = channel.connect()
            if connection is not None:
                connection.close()
                return None
        time.sleep(0.1)
    return None


class Lines:
    """A connection's input, one line of text at a time (UTF-8, undecodable bytes replaced)."""

    def __init__(self, stream: SocketStream) -> None:
        self._buffer = BufferedByteReceiveStream(stream)

    async def line(self, limit: int) -> bytes | None:
        """The next line's bytes, without its newline; None at the end of input."""
        try:
            return await self._buffer.receive_until(b"\n", limit)
        except (anyio.IncompleteRead, anyio.EndOfStream, *CLOSED):
            return None

    async def __aiter__(self) -> AsyncIterator[str]:
        # A line over MAX_LINE (DelimiterNotFound) ends the session, as a closed input would.
        with contextlib.suppress(anyio.DelimiterNotFound):
            while (line := await self.line(MAX_LINE)) is not None:
                yield line.decode("utf-8", errors="replace")


class Replies:
    """A connection's output, written as the stdio transport writes a file."""

    def __init__(self, stream: SocketStream) -> None:
        self._stream = stream

    async def write(self, text: str) -> None:
        """Send `text`; BrokenPipeError once the bridge has gone, as a closed pipe would raise."""
        try:
            await self._stream.send(text.encode("utf-8"))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            raise BrokenPipeError from None

    async def flush(self) -> None:
        """Each write is sent whole."""
