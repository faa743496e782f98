"""The memory store as it opens in the background, which every tool call waits for.

The server answers the handshake and tools/list while the store opens (scrypt,
the storage, a pull, decrypting and indexing every memory); a tool call waits
for it, up to OPEN_WAIT, and when it cannot be opened gets the line saying why.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from mcp.server.mcpserver.exceptions import ToolError

if TYPE_CHECKING:
    from squirrel_mcp.book.memories import MemoryStore

# How long a tool call waits for the store to open (scrypt, the storage, a pull, decrypting and
# indexing every memory) before it is answered that the memory is still opening; the opening goes
# on, and a later call gets the memory. Generous: a large vault on a slow, busy machine.
OPEN_WAIT = 120.0
STILL_OPENING = (
    f"the memory is still being opened (unlocking, decrypting, indexing) after {OPEN_WAIT:g} s; "
    "nothing was done: try again in a moment"
)


class Opening:
    """The memory store as it opens in the background: not yet, opened, or the line saying why not.

    The server answers the handshake while the store opens; every tool call waits
    for it (`wait`). When it cannot be opened, every call gets the one line the
    server printed on stderr (what is wrong, what to change in the MCP config).
    """

    def __init__(self, store: MemoryStore | None = None) -> None:
        """A store still opening; or, given `store`, one opened already."""
        self._done = threading.Event()
        self._serving = threading.Event()
        self._store = store
        self._failure: str | None = None
        self._news: str | None = None
        self._news_lock = threading.Lock()
        if store is not None:
            self._done.set()

    def serving(self) -> None:
        """The server is built and reads its input: from here the opening may take the interpreter."""
        self._serving.set()

    def wait_until_serving(self, timeout: float) -> None:
        """Until `serving`, or `timeout` seconds at most."""
        self._serving.wait(timeout)

    def opened(self, store: MemoryStore, *, news: str | None = None) -> None:
        """The store is open: every waiting and later call uses it.

        `news`: what the opening did that the user should hear of (a new vault created),
        told once, in the first get_context's note (`take_news`).
        """
        self._store = store
        self._news = news
        self._done.set()

    def take_news(self) -> str | None:
        """What the opening did that the user should hear of, the first time it is asked; else None."""
        with self._news_lock:
            news, self._news = self._news, None
        return news

    def failed(self, line: str) -> None:
        """The store cannot be opened: every waiting and later call is answered `line`."""
        self._failure = line
        self._done.set()

    def store(self) -> MemoryStore | None:
        """The open store; None while it opens or when the opening failed."""
        return self._store if self._done.is_set() else None

    def failure(self) -> str | None:
        """The line the opening failed with; None while it opens or once it has opened."""
        return self._failure if self._done.is_set() else None

    def close(self, *, release: bool = False) -> None:
        """At shutdown: an opened store finishes, or writes, its snapshot (`MemoryStore.close`).

        `release`: its storage closed too (`MemoryStore.release`); the store is unusable after.
        """
        if self._store is not None:
            self._store.close()
            if release:
                self._store.release()

    def wait(self, timeout: float = OPEN_WAIT) -> MemoryStore:
        """The open store, after waiting up to `timeout` seconds for it; else a ToolError saying why not."""
        if not self._done.wait(timeout):
            raise ToolError(STILL_OPENING)
        if self._store is None:
            raise ToolError(self._failure or "the memory could not be opened")
        return self._store
