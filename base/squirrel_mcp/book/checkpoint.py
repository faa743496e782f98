"""Log integrity: a sealed checkpoint of what this machine has seen of the log, which the log must extend.

Each record is authenticated on its own; the log as a whole is not. So each
machine keeps, in its cache directory, a checkpoint of the log as it last saw
it: how many records, and a running hash over them in log order (a hash chain:
each link hashes the one before, the record's memory id and revision, and the
SHA-256 of its ciphertext). At every open the whole log is read anyway (the
first pull starts at 0), so the chain is recomputed at no extra round trip and
the checkpoint's link must be in it: a log that is shorter than what was seen,
one with a record removed or changed, or a different history (an older copy
written over since, a fork) fails. Later pulls extend the chain and move the
checkpoint forward.

When the log no longer extends the checkpoint, the store it belongs to refuses
to write (`write_refusal`) until the user accepts the log as it is (`accept`,
`squirrel-mcp doctor --accept-log`): a restored backup is legitimate, but only
the user can say so. A checkpoint file that exists but cannot be opened counts
as a failure too, never as a pass: otherwise damaging it would let a rolled-back
log through.

The file is sealed (AES-256-GCM) under an HKDF key of the data key, its
associated data naming the account, written atomically with mode 0600. Several
processes of one machine (the server, the CLI, the page) share it: each re-reads
it under a lock before writing and only ever moves it forward, so it never goes
back to a shorter checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from squirrel_mcp.core.files import atomic_write, private_dirs
from squirrel_mcp.core.lines import log_line
from squirrel_mcp.keys import crypto
from squirrel_mcp.storage import SealedRecord

if sys.platform != "win32":
    import fcntl

# The key that seals checkpoint files: crypto.derive_key(data key, PURPOSE).
PURPOSE = "log-checkpoint"
FORMAT = 1
LINK_BYTES = 32
# What the user runs to accept the log as it is now.
ACCEPT_COMMAND = "squirrel-mcp doctor --accept-log"


@dataclass(frozen=True)
class Place:
    """Where a machine keeps its checkpoints, and which log they are of.

    - `directory`: the cache directory's `squirrel-mcp` folder;
    - `location`: the storage the log is in (the vault's absolute path, or the
      sync server's URL), so two copies of one account at two places are two logs;
    - `read_only`: for a process that only looks (the embeddings plugin's
      diagnostic): its log is checked against the checkpoint as any other's, but it
      never moves the checkpoint and writes no snapshot.
    """

    directory: Path
    location: str
    read_only: bool = False

    def file(self, account_id: str, pattern: str = "log-{}.checkpoint") -> Path:
        """The file of `account_id` at this location named by `pattern`: the checkpoint by default.

        Named by a hash of both (put for "{}"), so neither reaches the file name as
        it is (an account id comes from storage).
        """
        name = hashlib.sha256(f"{account_id}\n{self.location}".encode()).hexdigest()[:32]
        return self.directory / pattern.format(name)


def _field(value: bytes) -> bytes:
    return len(value).to_bytes(4, "big") + value


def chain_start(account_id: str) -> bytes:
    """The link before the first record: binds the chain to its account."""
    return hashlib.sha256(_field(f"squirrel-mcp/v1/log-chain|{account_id}".encode())).digest()


def next_link(previous: bytes, record: SealedRecord) -> bytes:
    """The link after `record`: SHA-256 of the previous link, the record's address and ciphertext hash."""
    digest = hashlib.sha256(previous)
    digest.update(_field(record.memory_id.encode()))
    digest.update(_field(str(record.revision).encode()))
    digest.update(hashlib.sha256(record.ciphertext).digest())
    return digest.digest()


class LogChain:
    """The hash chain over the log as pulled, every link kept (32 bytes a record) to check any checkpoint."""

    def __init__(self, account_id: str) -> None:
        """An empty chain: no record seen yet."""
        self._links = bytearray(chain_start(account_id))

    @property
    def count(self) -> int:
        """How many records the chain covers."""
        return len(self._links) // LINK_BYTES - 1

    @property
    def head(self) -> Checkpoint:
        """The checkpoint of everything the chain covers."""
        return Checkpoint(self.count, bytes(self._links[-LINK_BYTES:]))

    def link(self, count: int) -> bytes | None:
        """The link after the first `count` records; None beyond the chain's end."""
        if not 0 <= count <= self.count:
            return None
        return bytes(self._links[count * LINK_BYTES : (count + 1) * LINK_BYTES])

    def extend(self, records: Iterable[SealedRecord]) -> None:
        """Add records pulled, in log order."""
        head = bytes(self._links[-LINK_BYTES:])
        for record in records:
            head = next_link(head, record)
            self._links += head

    def extends(self, checkpoint: Checkpoint) -> bool:
        """Whether the log this chain covers begins with the one `checkpoint` describes."""
        return self.link(checkpoint.count) == checkpoint.link


@dataclass(frozen=True)
class Checkpoint:
    """What a machine saw of the log: the first `count` records, ending in `link`."""

    count: int
    link: bytes


@dataclass(frozen=True)
class Repeat:
    """A record for a (memory, revision) the log already held: its place in the log (from 0), its address."""

    position: int
    memory_id: str
    revision: int


class CheckpointDamaged(Exception):
    """The checkpoint file exists but does not open (damaged, or sealed under another key)."""


def _ad(account_id: str) -> bytes:
    return f"squirrel-mcp/v1/log-checkpoint|{account_id}".encode()


def read_checkpoint(path: Path, key: bytes, account_id: str) -> Checkpoint | None:
    """The checkpoint in `path`; None when there is none; CheckpointDamaged when it does not open."""
    blob = sealed_checkpoint(path)
    return None if blob is None else open_checkpoint(blob, key, account_id)


def sealed_checkpoint(path: Path) -> bytes | None:
    """The checkpoint file's bytes as sealed; None when there is none; CheckpointDamaged when unreadable."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise CheckpointDamaged(f"it cannot be read ({error.strerror})") from None


def open_checkpoint(blob: bytes, key: bytes, account_id: str) -> Checkpoint:
    """The checkpoint sealed in `blob`; CheckpointDamaged when it does not open."""
    try:
        data = json.loads(crypto.open_sealed(key, blob, _ad(account_id)))
        count, link = data["count"], bytes.fromhex(data["link"])
        if data["format"] != FORMAT or type(count) is not int or count < 0 or len(link) != LINK_BYTES:
            raise ValueError("not a checkpoint")
    except (crypto.DecryptionError, ValueError, KeyError, TypeError):
        raise CheckpointDamaged(
            "it failed its integrity check (damaged, or sealed under another key)"
        ) from None
    return Checkpoint(count, link)


def write_checkpoint(path: Path, key: bytes, account_id: str, checkpoint: Checkpoint) -> None:
    """Seal `checkpoint` into `path`: atomically, mode 0600."""
    data = {"format": FORMAT, "count": checkpoint.count, "link": checkpoint.link.hex()}
    atomic_write(path, crypto.seal(key, json.dumps(data).encode(), _ad(account_id)))


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `path` (a lock file beside the checkpoint) across processes.

    Without it two processes could each read the checkpoint, and the slower one
    write back a shorter one. (On Windows there is no flock: the lock is only
    this process's, and a checkpoint can then briefly move back to one a record
    shorter, which weakens, never breaks, the check.)
    """
    private_dirs(path.parent)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        if sys.platform != "win32":
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@dataclass(frozen=True)
class FirstRead:
    """What a store's first pull read before it had the key: the checkpoint as sealed, then the log.

    `checkpoint`: the file's bytes (None: no file; CheckpointDamaged: unreadable);
    `chain`: the records read after it, chained.
    """

    checkpoint: bytes | CheckpointDamaged | None
    chain: LogChain


class LogWatch:
    """One store's watch over its log: the chain it pulled, the checkpoint, and whether the two still agree.

    The store calls `pulled` with every batch it pulls, `checked` once it has
    applied that batch (naming the records that repeat a memory's revision),
    `opened` after the first (full) pull, and `write_refusal` before every write.
    """

    def __init__(
        self,
        path: Path,
        key: bytes,
        account_id: str,
        *,
        read_only: bool = False,
        first: FirstRead | None = None,
    ) -> None:
        """Read the checkpoint now, before the store's first pull (see `opened` for why).

        `read_only`: check the log against the checkpoint, never write it (`Place.read_only`).
        `first`: the checkpoint's bytes were read already, before the first pull began
        (squirrel_mcp.book.log.FirstPull); they are opened now, with the key.
        """
        self._first = first
        self.path = path
        self.read_only = read_only
        self._key = key
        self._account_id = account_id
        self._lock = threading.Lock()
        self.chain = LogChain(account_id)
        #: What is wrong, in words, once the log no longer extends the checkpoint; None while it does.
        self.problem: str | None = None
        self._opened = False
        self._write_failed = False
        self._before = self._read()
        #: How many records at the log's start this machine saw before (its checkpoint) or accepted:
        #: a repeat among them was accepted with them; one after them makes the log diverged.
        self.trusted = 0 if self._before is None else self._before.count
        # The smallest checkpoint count whose acceptance settles the problem (past a repeat, if one).
        self._settled_at = 0
        # How many records of the chain `checked` has seen applied.
        self._checked = 0

    @classmethod
    def of(cls, place: Place, account_id: str, data_key: bytes, first: FirstRead | None = None) -> LogWatch:
        """The watch over `account_id`'s log at `place`, sealing with a key derived from `data_key`."""
        return cls(
            place.file(account_id),
            crypto.derive_key(data_key, PURPOSE),
            account_id,
            read_only=place.read_only,
            first=first,
        )

    def _read(self) -> Checkpoint | None:
        """The checkpoint on disk (the first time, as `first` read it); damaged, it sets `problem`: None."""
        first, self._first = self._first, None
        try:
            if first is None:
                return read_checkpoint(self.path, self._key, self._account_id)
            if isinstance(first.checkpoint, CheckpointDamaged):
                raise first.checkpoint
            if first.checkpoint is None:
                return None
            return open_checkpoint(first.checkpoint, self._key, self._account_id)
        except CheckpointDamaged as error:
            self._diverged(
                f"this machine's checkpoint of the memory log ({self.path}) cannot be used: {error}, "
                "so a log rolled back or with records removed could not be told from the real one"
            )
            return None

    def _diverged(self, problem: str, settled_at: int = 0) -> None:
        if self.problem is None:
            self.problem = problem
            self._settled_at = settled_at
            log_line(f"{problem}. {consequence()}")

    def _compare(self, checkpoint: Checkpoint) -> bool:
        """Whether the chain extends `checkpoint`; if not, `problem` says how it differs."""
        if self.chain.extends(checkpoint):
            return True
        found, seen = self.chain.count, checkpoint.count
        if found < seen:
            self._diverged(
                f"the memory log holds {records(found)}, fewer than the {seen} this machine saw in it: "
                "records were removed, or an older copy was put back"
            )
        else:
            self._diverged(
                f"the memory log no longer begins with the {records(seen)} this machine saw in it "
                f"(it holds {found}): a record was removed or changed, or this is a different history "
                "(an older copy written to since, or a copy forked from it)"
            )
        return False

    def pulled(self, records: list[SealedRecord], chain: LogChain | None = None) -> None:
        """Chain the records of one pull (`checked` moves the checkpoint forward once they are applied).

        `chain`: for the first pull, its records chained already where they were read.
        """
        with self._lock:
            if chain is not None and self.chain.count == 0 and chain.count == len(records):
                self.chain = chain
            else:
                self.chain.extend(records)

    def checked(self, repeats: list[Repeat]) -> None:
        """The records pulled were applied; `repeats` held a (memory, revision) already in the log.

        An honest storage holds each pair once (a unique key in the vault and on
        the sync server), so a repeat past what this machine trusted is a record
        replaced or added behind its back: the log has diverged. After the first
        pull, the checkpoint then moves forward, unless the log diverged.
        """
        with self._lock:
            for repeat in repeats:
                if repeat.position >= self.trusted:
                    self._diverged(
                        f"the memory log holds a second record for revision {repeat.revision} of memory "
                        f"{repeat.memory_id} (record {repeat.position + 1} of the log): storage keeps one "
                        "record per revision, so one was replaced or added behind this machine's back",
                        settled_at=repeat.position + 1,
                    )
                    break
            if self._opened and self.chain.count > self._checked:
                self._advance()
            self._checked = self.chain.count

    def opened(self) -> None:
        """After the first pull (the whole log): it must extend the checkpoint read before it began.

        Read before the pull, not after: another process of this machine may
        append and move the checkpoint past what this pull returned meanwhile,
        while anything it had recorded before the pull began was in the log then.
        """
        with self._lock:
            self._opened = True
            if self.problem is None and (self._before is None or self._compare(self._before)):
                self._advance()

    def _advance(self) -> None:
        """Write the chain's head as the checkpoint if it is further on, after checking the file once more."""
        if self.problem is not None or self.read_only:
            return
        with _file_lock(self._lock_path()):
            current = self._read()
            if self.problem is not None:
                return
            if current is not None and current.count > self.chain.count:
                # Another process saw more already; this one has not pulled it yet.
                return
            if current is not None and not self._compare(current):
                return
            if current is None or current.count < self.chain.count:
                self._write(self.chain.head)

    def _write(self, checkpoint: Checkpoint) -> None:
        try:
            write_checkpoint(self.path, self._key, self._account_id, checkpoint)
        except OSError as error:
            if not self._write_failed:
                self._write_failed = True
                log_line(
                    f"the checkpoint of the memory log cannot be written to {self.path} "
                    f"({error.strerror}): a rollback of the log will not be noticed until it can"
                )
            return
        self._write_failed = False

    def _lock_path(self) -> Path:
        return self.path.with_name(self.path.name + ".lock")

    def write_refusal(self) -> str | None:
        """Why nothing may be written now, or None.

        When the log diverged, the checkpoint is read again first: if the user
        accepted this log meanwhile (`doctor --accept-log` in another process),
        this chain extends the new checkpoint, and writing resumes.
        """
        with self._lock:
            if self.problem is None:
                return None
            try:
                current = read_checkpoint(self.path, self._key, self._account_id)
            except CheckpointDamaged:
                current = None
            if current is not None and self.chain.extends(current) and current.count >= self._settled_at:
                self.problem = None
                self.trusted = max(self.trusted, current.count)
                self._advance()
                return None
            return f"{self.problem}; nothing was written. {accept_advice()}"

    def accept(self) -> int:
        """Take the log as it is now for the checkpoint, whatever the file held; the records it covers."""
        with self._lock, _file_lock(self._lock_path()):
            write_checkpoint(self.path, self._key, self._account_id, self.chain.head)
            self.problem = None
            self.trusted = self.chain.count
            self._write_failed = False
            return self.chain.count


def records(count: int) -> str:
    """'1 record', '2 records'."""
    return f"{count} record" if count == 1 else f"{count} records"


def accept_advice() -> str:
    """What the user does about a diverged log, for errors and notes."""
    return (
        "If you restored a backup or otherwise expect this, accept the log as it is now with "
        f"`{ACCEPT_COMMAND}`; if not, the vault or the sync server was tampered with or lost "
        "records: restore it from a backup first (an export holds every memory)"
    )


def consequence() -> str:
    """What the store does about a diverged log, for the stderr line."""
    return f"Memories can be read; nothing will be written until it is accepted. {accept_advice()}"
