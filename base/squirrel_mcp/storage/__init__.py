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

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    from squirrel_mcp.keys.crypto import KdfParams

# Hex digits of a key's fingerprint shown to people: in a failed unlock's line and in
# `squirrel-mcp-sync list-account-keys`, so that the two can be matched (48 bits).
FINGERPRINT_SHOWN = 12


@dataclass(frozen=True)
class Account:
    """What unlocks an account (never a key, only what the passphrase needs), and what guards its key.

    `key_change_verifier` is SHA-256 of the data key's key-change proof
    (`crypto.key_change_verifier`): storage replaces the wrapped key only for a
    caller that sends the proof. None for an account made before verifiers were
    kept, until a client that unlocks it sets it (`Storage.set_key_change_verifier`).
    """

    account_id: str
    kdf: KdfParams
    wrapped_data_key: bytes
    key_change_verifier: bytes | None = None

    def fingerprint(self) -> str:
        """SHA-256 (hex) of what the passphrase unlocks: account id, KDF salt and parameters, wrapped key.

        All of it is held in the open, so the fingerprint is no secret. A machine
        remembers the one it last unlocked (book/rekey.py); the sync server's
        `list-account-keys` shows each key's, so the two can be matched.
        """
        kdf = self.kdf
        material = f"{self.account_id}|{kdf.salt.hex()}|{kdf.n}|{kdf.r}|{kdf.p}|{self.wrapped_data_key.hex()}"
        return hashlib.sha256(material.encode()).hexdigest()


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


class AccountExists(StorageError):
    """The vault (or the API key's slot) already holds an account: another process created it first."""


class KeyChanged(StorageError):
    """The account's key (KDF parameters, wrapped data key) is no longer the one the caller read.

    Another process or machine changed the passphrase meanwhile; nothing was changed.
    """


class KeyChangeForbidden(StorageError):
    """A key change without the proof its account's verifier asks for (or on an account without one).

    Holding the API key is not enough to replace an account's key: the caller must
    also show it holds the data key. Nothing was changed.
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
        """Store a new account (its key-change verifier with it); StorageError if one exists already."""
        ...

    def replace_key(self, expected: Account, new: Account, proof: bytes) -> None:
        """Store `new`'s KDF parameters and wrapped data key, if the stored ones are still `expected`'s.

        Only for a caller that holds the data key: `proof` (`crypto.key_change_proof`)
        must match the account's verifier, else KeyChangeForbidden, changing
        nothing (also when the account has no verifier yet). Then a
        compare-and-swap, atomic: either the account holds `new`'s key or it still
        holds what it held. KeyChanged, changing nothing, when the stored key is no
        longer `expected`'s. The account id and its verifier never change.
        """
        ...

    def set_key_change_verifier(self, verifier: bytes) -> bytes | None:
        """Give the account `verifier` if it has none yet (an account made before verifiers were kept).

        Set once: an account that holds a verifier keeps it. Returns the verifier
        the account holds afterwards (`verifier`, or the one it held), or None
        from a sync server too old to keep verifiers. StorageError if there is no
        account.
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


@dataclass(frozen=True)
class Tail:
    """A log as storage holds it now, up to a cursor: how many records, and the record at the cursor."""

    count: int
    last: SealedRecord | None


@runtime_checkable
class FileStorage(Storage, Protocol):
    """A backend in a file of this machine, which other programs can replace, delete or edit meanwhile.

    A backup restored, a sync tool or `mv` puts another file at the path while a
    process holds the one it opened; sqlite3 can delete a record. The memory book
    asks these cheap questions before every operation, so that it notices such a
    change at its next call, not at its next start.
    """

    #: Where the file is, for the messages saying what happened to it.
    path: Path

    def moved(self) -> Literal["gone", "replaced"] | None:
        """Whether the path still names the file this storage opened: None, or what became of it."""
        ...

    def reopen(self) -> FileStorage:
        """The storage at the same path opened afresh, as a start opens it (StorageError if it cannot be)."""
        ...

    def data_version(self) -> int:
        """A number that changes whenever another connection (another process) commits to the file."""
        ...

    def tail(self, cursor: int) -> Tail:
        """How many records the log holds up to `cursor` (as `changes_since` returned it), and the one at it.

        Read together, as of one moment.
        """
        ...
