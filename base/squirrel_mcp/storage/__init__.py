"""Where sealed records live: the small interface every backend implements.

A backend stores an account (its id, KDF parameters and wrapped data key) and an
append-only log of sealed records, one per memory revision. It never sees a key
or plaintext, and it understands nothing of memories beyond "id, revision,
bytes". Everything else (decryption, history, search) happens in
`squirrel_mcp.book.memories`, the same for every backend.

The local SQLite vault (`storage.local`) is the default; the remote API client
(`storage.remote`, used when SQUIRREL_API_BASE_URL is set) is one more class
with these methods.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from squirrel_mcp.keys.crypto import KdfParams


@dataclass(frozen=True)
class Account:
    """What unlocks an account: never a key, only what the passphrase needs."""

    account_id: str
    kdf: KdfParams
    wrapped_data_key: bytes


@dataclass(frozen=True)
class SealedRecord:
    """One memory revision as storage holds it: ciphertext plus its address."""

    memory_id: str
    revision: int
    ciphertext: bytes


# What a sync server without this API key's account means, for the messages saying so
# (after "the sync server at URL"). Only `init` creates an account there.
NO_REMOTE_ACCOUNT = (
    "holds no account for this API key: if this is a new account, run `squirrel-mcp init`; "
    "if it held your memories, the server has lost them"
)


class StorageError(Exception):
    """The backend cannot be used (missing, unreadable, not a vault)."""


class KeyChanged(StorageError):
    """The account's key (KDF parameters, wrapped data key) is no longer the one the caller read.

    Another process or machine changed the passphrase meanwhile; nothing was changed.
    """


class RevisionConflict(Exception):
    """A record is not its memory's next revision: that revision exists already, or it skips ahead.

    Another process (or machine) wrote this memory meanwhile; the caller re-reads
    and reports it rather than overwriting. `expected`, when the backend knows
    it, is the memory's next revision (the sync server says it in its answer).
    """

    def __init__(self, memory_id: str, revision: int, expected: int | None = None) -> None:
        if expected is not None and revision >= expected:
            reason = f"memory {memory_id} cannot skip to revision {revision}"
        else:
            reason = f"memory {memory_id} already has a revision {revision}"
        super().__init__(reason if expected is None else f"{reason}; its next revision is {expected}")
        self.memory_id = memory_id
        self.revision = revision


class Storage(Protocol):
    """The backend interface: an account and an append-only log of sealed records."""

    #: Seconds a pull stays fresh. A read within this long of the last pull skips
    #: `changes_since`; a write always pulls first. 0 means: pull before every operation.
    pull_interval: float

    def load_account(self) -> Account | None:
        """The stored account, or None when this storage has none yet."""
        ...

    def create_account(self, account: Account) -> None:
        """Store a new account; raises StorageError if one exists already."""
        ...

    def replace_key(self, expected: Account, new: Account) -> None:
        """Store `new`'s KDF parameters and wrapped data key, if the stored ones are still `expected`'s.

        A compare-and-swap, atomic: either the account holds `new`'s key or it
        still holds what it held. KeyChanged, changing nothing, when the stored
        key is no longer `expected`'s. The account id never changes.
        """
        ...

    def append(self, records: list[SealedRecord]) -> None:
        """Store records atomically (all or none).

        Raises RevisionConflict, storing nothing, if any (memory id, revision)
        is taken.
        """
        ...

    def changes_since(self, cursor: int) -> tuple[list[SealedRecord], int]:
        """Records stored after `cursor` (0 = all), in storage order, and the new cursor."""
        ...

    def close(self) -> None:
        """Release the backend's resources."""
        ...
