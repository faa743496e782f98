"""The read-only view of the memories that plugins get at start-up (`MemoryReader`).

Plugins never receive the store itself, so they cannot write to it, and every key
they get is one derived for their own purpose, never the data key.
"""

from __future__ import annotations

from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.core.models import Revision


class MemoryReader:
    """Read-only access to the decrypted memories, as plugins get it at start-up."""

    def __init__(self, store: MemoryStore) -> None:
        """Wrap `store`; plugins never receive the store itself, so they cannot write to it."""
        self._store = store

    @property
    def account_id(self) -> str:
        """The vault account's id (to name per-account files)."""
        return self._store.account_id

    def derive_key(self, purpose: str) -> bytes:
        """A 256-bit key of the plugin's own for `purpose` (`crypto.derive_key`), never the data key."""
        return self._store.derive_key(purpose)

    def current(self) -> list[Revision]:
        """The latest readable revision of every live memory, newest change first."""
        return self._store.current()

    def get(self, memory_id: str) -> Revision | None:
        """The latest revision of a live memory, or None when no live memory has this id."""
        return self._store.live(memory_id)
