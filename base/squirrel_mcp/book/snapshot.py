"""A sealed snapshot of the decrypted state, so that a large vault opens without decrypting every record.

Opening a store pulls the whole log, and decrypting, checking and indexing every
record is most of the time a large vault takes to open. So the store keeps, in
this machine's cache directory beside the log checkpoint (squirrel_mcp.book.checkpoint),
a snapshot of what it decrypted: how many records of the log it covers, the log's
chain link after them (the hash chain the checkpoint uses), every memory's readable
revisions and unreadable revision numbers, and the search index built from them.

At the next open the whole log is still pulled and chained. The snapshot is used
only when it opens under this account's key and its link is the chain's link after
its `count` records: those records are then exactly the ones it was made from (the
chain hashes each record's memory id, revision and ciphertext, and decrypting is
deterministic), so its state is the state decrypting them would give, and only the
records after them are decrypted and indexed. Anything else (no file, a damaged
or truncated one, one sealed under another key or for another account, another
format, byte order or code version, a log shorter than its count, a link that differs: a vault
replaced by an older copy, a record changed) is ignored without a word, and the
store decrypts the whole log as if there were no snapshot. A snapshot never
decides what the log holds; the log checkpoint still checks the whole chain.
The index keeps the epoch it was built with (index.py folds each memory's decay up
to the epoch into its weights, and a search applies the rest), so its scores are a
rebuilt index's up to floating-point rounding.

The store writes a snapshot once it decrypted at least STALE_RECORDS records
beyond the one it read, in the background, and at a clean shutdown when it is
that stale. Several processes may write it: each write is complete and atomic
(`files.atomic_write`), the last one wins, and any one of them is valid for the
log it describes. A file that changed since this process read or wrote it
(another process wrote one, or a copy was put back) is read again before this
process writes: when it covers at least as many records, it stays.

Security: the file is sealed with AES-256-GCM under `crypto.derive_key(data key,
"state-snapshot")`, its associated data naming the account and the format; it
is written with mode 0600, and nothing of it is readable without the data key,
the key every record is sealed under anyway. The seal authenticates the whole
file, so its contents, which only this code wrote, are trusted once it opens
(revisions are rebuilt without validating them again).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import operator
import os
import struct
import sys
import threading
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from squirrel_mcp.book.checkpoint import LINK_BYTES, LogChain, Place
from squirrel_mcp.core import models
from squirrel_mcp.core.files import atomic_write
from squirrel_mcp.core.lines import log_line
from squirrel_mcp.core.models import EVERY_FIELD, Revision
from squirrel_mcp.keys import crypto
from squirrel_mcp.search import index
from squirrel_mcp.search.index import IndexImage
from squirrel_mcp.text import stopwords, tokens

# The key that seals snapshots: crypto.derive_key(data key, PURPOSE).
PURPOSE = "state-snapshot"
# Raised whenever FIELDS changes (2: a revision's project): a snapshot of another format
# is not read, and the store rebuilds it from the log once.
FORMAT = 2
# A store writes a snapshot once it has decrypted this many records beyond the one it read.
STALE_RECORDS = 1000
# A revision is stored as the list of its fields' values, in this order.
FIELDS = tuple(Revision.model_fields)
_ENTITY, _CATEGORY, _CHANGE = FIELDS.index("entity"), FIELDS.index("category"), FIELDS.index("change")
_CREATED, _UPDATED = FIELDS.index("createdAt"), FIELDS.index("updatedAt")
_values = operator.attrgetter(*FIELDS)
# The plaintext starts with the header's length, then the header (JSON), then the sections.
_LENGTH = struct.Struct(">I")
# The sections after the header, in order: JSON documents, then arrays as raw machine values.
_SECTIONS = ("histories", "index", "sizes", "docs", "weights", "categories", "content")

# One memory's history: its id, its readable revisions (oldest first), its unreadable revision numbers.
History = tuple[str, list[Revision], list[int]]


@dataclass(frozen=True)
class State:
    """What a store decrypted from the first `count` records of its log, which end in `link`."""

    count: int
    link: bytes
    histories: list[History]
    index: IndexImage

    def addresses(self) -> int:
        """How many (memory, revision) pairs the state holds, readable or not: `count`, unless one repeats."""
        return sum(len(revisions) + len(unreadable) for _, revisions, unreadable in self.histories)


# The memory book's modules that decide what the store keeps of the records it opens (which
# revisions, in what order, how they are opened), beside this one. Read by path, not imported:
# they import this module.
STORE_MODULES = ("memories.py", "view.py", "log.py")


@functools.cache
def code_version() -> str | None:
    """What a snapshot's state depends on besides the records: this code, and the Python running it.

    Revisions are as `models` validated them and the store (`memories`, `view`,
    `log`) kept them; the index is as `index` and `text` built it, with this
    Python's Unicode tables. Other code (an upgrade, or a change in a checkout)
    could make another state of the same records, so a snapshot records this
    (SHA-256 of those modules' source and the Python version) and one written by
    other code is not used. None when a module's source cannot be read (then no
    snapshot is used or written).
    """
    here = Path(__file__)
    sources = [Path(str(module.__file__)) for module in (crypto, index, models, stopwords, tokens)]
    sources += [here.with_name(name) for name in STORE_MODULES] + [here]
    digest = hashlib.sha256(sys.version.encode())
    for source in sources:
        try:
            digest.update(source.read_bytes())
        except OSError:
            return None
    return digest.hexdigest()


def _ad(account_id: str) -> bytes:
    return f"squirrel-mcp/v1/state-snapshot|{account_id}|format {FORMAT}".encode()


def encode(state: State) -> list[bytes]:
    """The plaintext of a snapshot of `state`, in parts (header first) to be joined."""
    image = state.index
    histories = [
        [memory_id, [_values(revision) for revision in revisions], unreadable]
        for memory_id, revisions, unreadable in state.histories
    ]
    sections = [
        json.dumps(histories, separators=(",", ":")).encode(),
        json.dumps({"ids": image.ids, "terms": image.terms, "partial": image.partial}).encode(),
        image.sizes.tobytes(),
        image.docs.tobytes(),
        image.weights.tobytes(),
        image.categories,
        image.content.tobytes(),
    ]
    header = {
        "format": FORMAT,
        "count": state.count,
        "link": state.link.hex(),
        "byteorder": sys.byteorder,
        "code": code_version(),
        "epoch": image.epoch,
        "sections": [len(section) for section in sections],
    }
    encoded = json.dumps(header).encode()
    return [_LENGTH.pack(len(encoded)), encoded, *sections]


def _header(text: memoryview) -> tuple[dict[str, object], int]:
    """The header and where the sections begin; ValueError when it is not a snapshot header."""
    (length,) = _LENGTH.unpack_from(text)
    header = json.loads(bytes(text[_LENGTH.size : _LENGTH.size + length]))
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ValueError("not a snapshot of this format")
    return header, _LENGTH.size + length


def decode(text: memoryview, chain: LogChain) -> State | None:
    """The state in a snapshot's plaintext if it describes the start of the log `chain` covers, else None.

    ValueError (or KeyError, TypeError) when the plaintext is not a snapshot.
    """
    header, start = _header(text)
    count, link = header["count"], bytes.fromhex(str(header["link"]))
    if type(count) is not int or len(link) != LINK_BYTES or header["byteorder"] != sys.byteorder:
        return None
    if code_version() is None or header["code"] != code_version():
        return None
    if chain.link(count) != link:
        return None
    sizes = header["sections"]
    if not isinstance(sizes, list) or len(sizes) != len(_SECTIONS) or start + sum(sizes) != len(text):
        raise ValueError("the sections do not fill the snapshot")
    sections: dict[str, memoryview] = {}
    for name, size in zip(_SECTIONS, sizes, strict=True):
        sections[name] = text[start : start + size]
        start += size
    histories = _histories(json.loads(bytes(sections["histories"])))
    return State(count, link, histories, _image(sections, float(header["epoch"])))  # type: ignore[arg-type]


def _histories(document: list[tuple[str, list[list[object]], list[int]]]) -> list[History]:
    """The histories, each revision made from its fields' values as `Revision.model_construct` makes it.

    The seal vouches that this module wrote the values, from revisions validated
    when their records were opened. `model_construct` itself loops over the fields
    in Python for each revision, which took three times as long at 100,000 memories;
    this sets what it sets (every field given, so all of them are "set"; no extra
    fields, no private attributes) directly. tests/test_snapshot.py checks that the
    result equals the validated revision, fields set included. Every revision holds the
    one EVERY_FIELD set, as `sharing_fields_set` makes a validated one hold it.
    """
    new = object.__new__
    assign = object.__setattr__
    # JSON gives each value its own string; the values many revisions repeat are held once.
    held: dict[object, object] = {}
    histories = []
    for memory_id, rows, unreadable in document:
        revisions = []
        for values in rows:
            if len(values) != len(FIELDS):
                raise ValueError("a revision of the snapshot has the wrong number of fields")
            entity, category, change = values[_ENTITY], values[_CATEGORY], values[_CHANGE]
            values[_ENTITY] = held.setdefault(entity, entity)
            values[_CATEGORY] = held.setdefault(category, category)
            values[_CHANGE] = held.setdefault(change, change)
            if values[_UPDATED] == values[_CREATED]:
                values[_UPDATED] = values[_CREATED]
            revision = new(Revision)
            assign(revision, "__dict__", dict(zip(FIELDS, values, strict=True)))
            assign(revision, "__pydantic_fields_set__", EVERY_FIELD)
            assign(revision, "__pydantic_extra__", None)
            assign(revision, "__pydantic_private__", None)
            revisions.append(revision)
        histories.append((memory_id, revisions, unreadable))
    return histories


def _array(typecode: str, data: memoryview) -> array[int] | array[float]:
    values = array(typecode)
    values.frombytes(data)
    return values


def _image(sections: dict[str, memoryview], epoch: float) -> IndexImage:
    """The search index's image from a snapshot's sections."""
    document = json.loads(bytes(sections["index"]))
    return IndexImage(
        epoch=epoch,
        ids=document["ids"],
        terms=document["terms"],
        sizes=_array("I", sections["sizes"]),  # type: ignore[arg-type]
        docs=_array("I", sections["docs"]),  # type: ignore[arg-type]
        weights=_array("d", sections["weights"]),  # type: ignore[arg-type]
        partial=document["partial"],
        categories=bytes(sections["categories"]),
        content=_array("I", sections["content"]),  # type: ignore[arg-type]
    )


class Snapshots:
    """The snapshot file of one account's log at one place, the key it is sealed under, and its writes."""

    def __init__(self, path: Path, key: bytes, account_id: str, *, read_only: bool = False) -> None:
        """The snapshot at `path`, sealed under `key` for `account_id`; `read_only`: used, never written."""
        self.path = path
        self.read_only = read_only
        self._key = key
        self._account_id = account_id
        #: How many records the snapshot read or last written covers (the store sets it when it uses one).
        self.covered = 0
        self._writer: threading.Thread | None = None
        self._failed = False
        # The file as this process last read or wrote it (device, inode, size, mtime), or None.
        self._seen: tuple[int, int, int, int] | None = None

    @classmethod
    def of(cls, place: Place, account_id: str, data_key: bytes) -> Snapshots:
        """The snapshot of `account_id`'s log at `place` (named like its checkpoint), keyed by `data_key`."""
        return cls(
            place.file(account_id, "state-{}.snapshot"),
            crypto.derive_key(data_key, PURPOSE),
            account_id,
            read_only=place.read_only,
        )

    def read(self, chain: LogChain) -> State | None:
        """The state in the snapshot if it opens and is of the start of the log `chain` covers; else None."""
        try:
            with self.path.open("rb") as file:
                status = os.fstat(file.fileno())
                blob = bytearray(status.st_size)
                if file.readinto(blob) != len(blob):
                    return None
                self._seen = _identity(status)
        except OSError:
            return None
        try:
            text = crypto.open_in_place(self._key, memoryview(blob), _ad(self._account_id))
            return decode(text, chain)
        except (crypto.DecryptionError, ValueError, KeyError, TypeError, IndexError, struct.error):
            return None

    def write_if_stale(self, count: int, capture: Callable[[], State | None]) -> None:
        """Write `capture()` in a daemon thread if `count` is STALE_RECORDS past what the snapshot covers.

        Not while a write is under way: the next pull (or `finish`) looks again.
        """
        if self.read_only or count - self.covered < STALE_RECORDS:
            return
        if self._writer is not None and self._writer.is_alive():
            return
        self._writer = threading.Thread(
            target=self._write_captured, args=(capture,), name="squirrel-mcp-snapshot", daemon=True
        )
        self._writer.start()

    def finish(self, count: int, capture: Callable[[], State | None]) -> None:
        """At shutdown: wait for the write under way; then write `capture()` if `count` is still stale."""
        writer = self._writer
        if writer is not None:
            writer.join()
        if not self.read_only and count - self.covered >= STALE_RECORDS:
            self._write_captured(capture)

    def _write_captured(self, capture: Callable[[], State | None]) -> None:
        """Write the state `capture` returns (it takes the store's lock; sealing and writing do not)."""
        state = capture()
        if state is None:
            return
        if self._covered_elsewhere(state.count):
            self.covered = max(self.covered, state.count)
            return
        try:
            self.write(state)
        except OSError as error:
            if not self._failed:
                log_line(
                    f"the snapshot of the decrypted memories cannot be written to {self.path} "
                    f"({error.strerror}): the next start decrypts every record again"
                )
            self._failed = True
        else:
            self._failed = False
        # Also after a failure: the next try waits for STALE_RECORDS more records.
        self.covered = max(self.covered, state.count)

    def write(self, state: State) -> None:
        """Seal `state` into the snapshot file: atomically, mode 0600; OSError when it cannot be written."""
        if code_version() is None:
            return
        parts = encode(state)
        blob = bytearray(crypto.SEALED_PREFIX)
        for part in parts:
            blob += part
        blob += bytes(crypto.TAG_BYTES)
        crypto.seal_in_place(self._key, memoryview(blob), _ad(self._account_id))
        atomic_write(self.path, blob)
        with contextlib.suppress(OSError):
            self._seen = _identity(self.path.stat())

    def _covered_elsewhere(self, count: int) -> bool:
        """Whether the file, changed since this process last read or wrote it, covers `count` records or more.

        Then another process wrote it (or a copy was put back) and it stays: writing this
        state over it would make the next open decrypt more. Its header is read under the
        key; a file that does not open, or that this code would not use, is written over.
        """
        try:
            status = self.path.stat()
        except OSError:
            return False
        if _identity(status) == self._seen:
            return False
        self._seen = _identity(status)
        try:
            blob = bytearray(self.path.read_bytes())
            header, _ = _header(crypto.open_in_place(self._key, memoryview(blob), _ad(self._account_id)))
        except (OSError, crypto.DecryptionError, ValueError, TypeError, struct.error):
            return False
        found = header.get("count")
        return type(found) is int and found >= count and header.get("code") == code_version()


def _identity(status: os.stat_result) -> tuple[int, int, int, int]:
    """What tells one snapshot file from another written at the same path: device, inode, size, mtime."""
    return status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns
