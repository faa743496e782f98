"""The vectors of one account: a table in memory and its encrypted file in the cache directory.

Embedding vectors can reveal roughly what a text said, so they are kept like the
text itself: one file per account, `squirrel-notes/memory-vectors-<account id>.bin`
in the OS cache directory (SQUIRREL_MEMORY_CACHE_DIR overrides), sealed with
AES-256-GCM under a key HKDF-derived from the data key, replaced atomically with
mode 0600. The file's layout:

    b"SQMV" | format version (1 byte) | squirrel_mcp.keys.crypto.seal(key, body, header + account id)

and the body, once opened:

    length of the meta JSON (4 bytes, big-endian) | meta JSON | float32 rows, little-endian

where the meta JSON holds the model id, the manifest's SHA-256, the text recipe's
version, the dimensions, each row's memory id and revision in row order, and
`passages`: [row, count] for each memory longer than the model's window. The rows
are first one per memory (its whole text), then the passages, `count` rows for the
memory of `row` after those of the entry before. A file whose model, manifest or
recipe differs from the running one is dropped whole: every memory is embedded
again (a file of recipe 1, before passages, is read and dropped so).
"""

from __future__ import annotations

import json
import os
import re
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import platformdirs

from squirrel_mcp.plugin_api import (
    SEALED_PREFIX,
    TAG_BYTES,
    DecryptionError,
    atomic_write,
    open_in_place,
    seal_in_place,
)

CACHE_DIR_VARIABLE = "SQUIRREL_MEMORY_CACHE_DIR"
MAGIC = b"SQMV"
FORMAT_VERSION = 1
HEADER = MAGIC + bytes([FORMAT_VERSION])
KEY_PURPOSE = "memory-vectors"
_ACCOUNT_ID = re.compile(r"[0-9A-Za-z_-]{1,128}")

Matrix = npt.NDArray[np.float32]


class VectorFileError(Exception):
    """The vector file cannot be used: damaged, tampered with, or of another format."""


@dataclass(frozen=True)
class Stamp:
    """What the vectors were made with; a file with another stamp is embedded again."""

    model: str
    manifest_sha256: str
    recipe: int
    dimensions: int


def vector_path(account_id: str, environ: Mapping[str, str] = os.environ) -> Path:
    """Where an account's vector file lives: <cache dir>/squirrel-notes/memory-vectors-<id>.bin."""
    if not _ACCOUNT_ID.fullmatch(account_id):
        # Account ids are hex; anything else must not become part of a path.
        raise ValueError("the account id cannot name a file")
    base = environ.get(CACHE_DIR_VARIABLE) or platformdirs.user_cache_dir()
    return Path(base) / "squirrel-notes" / f"memory-vectors-{account_id}.bin"


class VectorTable:
    """Memory id -> (revision, unit vector, passage vectors), as rows of two contiguous float32 matrices.

    Every memory has one row, its whole text's vector; a memory longer than the model's
    window also has passage rows, each naming its memory's row (`_owner`). Cosines
    against a query are two matrix products, never a loop. A removed row is filled by
    the last one, so the rows stay contiguous.
    """

    def __init__(self, dimensions: int) -> None:
        """An empty table for vectors of `dimensions` floats."""
        self.dimensions = dimensions
        self._rows: Matrix = np.zeros((0, dimensions), dtype=np.float32)
        self._count = 0
        self.ids: list[str] = []
        self.revisions: list[int] = []
        self._row: dict[str, int] = {}
        self._passages: Matrix = np.zeros((0, dimensions), dtype=np.float32)
        self._owner: npt.NDArray[np.intp] = np.zeros(0, dtype=np.intp)
        self._passage_count = 0
        # Memory id -> its passages' rows, for the memories that have any.
        self._held: dict[str, list[int]] = {}
        # True while rows and passages are views of one buffer (a file read in place): growing
        # either copies both, or the buffer would stay alive for the other's sake.
        self._shared = False

    def __len__(self) -> int:
        return self._count

    def __contains__(self, memory_id: object) -> bool:
        return memory_id in self._row

    @property
    def passage_count(self) -> int:
        """How many passage rows the table holds, over all memories."""
        return self._passage_count

    def row(self, memory_id: str) -> int | None:
        """The row of a memory's vector, or None when it has none."""
        return self._row.get(memory_id)

    def revision(self, memory_id: str) -> int | None:
        """The revision a memory's vector was made from, or None when it has none."""
        row = self._row.get(memory_id)
        return None if row is None else self.revisions[row]

    def matrix(self) -> Matrix:
        """The live rows (a view, C-contiguous): row i is the whole-text vector of ids[i]."""
        rows: Matrix = self._rows[: self._count]
        return rows

    def vector(self, memory_id: str) -> Matrix:
        """One memory's whole-text vector (a copy)."""
        vector: Matrix = self._rows[self._row[memory_id]].copy()
        return vector

    def passages(self, memory_id: str) -> Matrix:
        """One memory's passage vectors in the order they were put (a copy; no rows for a short memory)."""
        rows: Matrix = self._passages[self._held.get(memory_id, [])].copy()
        return rows

    def cosines(self, query: Matrix, *, passages: bool = True) -> Matrix:
        """Each memory's cosine to the unit vector `query` (row i: ids[i]).

        A memory's cosine is the best of its whole text's and its passages' (its whole
        text's alone when `passages` is False).
        """
        best: Matrix = self.matrix() @ query
        if passages and self._passage_count:
            count = self._passage_count
            np.maximum.at(best, self._owner[:count], self._passages[:count] @ query)
        return best

    def put_many(
        self, entries: Iterable[tuple[str, int]], vectors: Matrix, passages: Sequence[Matrix] | None = None
    ) -> None:
        """Set the vectors of these (id, revision) pairs, row i of `vectors` for the i-th pair.

        `passages`: the i-th pair's passage vectors (none: no passages), replacing any it had.
        """
        pairs = list(entries)
        none = np.zeros((0, self.dimensions), dtype=np.float32)
        pieces = [none] * len(pairs) if passages is None else passages
        if vectors.shape != (len(pairs), self.dimensions) or len(pieces) != len(pairs):
            raise ValueError("one vector per memory, of the model's dimensions")
        new = sum(1 for memory_id, _ in pairs if memory_id not in self._row)
        self.reserve(self._count + new)
        self._reserve_passages(self._passage_count + sum(len(piece) for piece in pieces))
        for (memory_id, revision), vector, piece in zip(pairs, vectors, pieces, strict=True):
            row = self._row.get(memory_id)
            if row is None:
                row = self._row[memory_id] = self._count
                self._count += 1
                self.ids.append(memory_id)
                self.revisions.append(revision)
            else:
                self.revisions[row] = revision
                self._drop_passages(memory_id)
            self._rows[row] = vector
            if len(piece):
                if piece.shape[1:] != (self.dimensions,):
                    raise ValueError("passage vectors of the model's dimensions")
                at = self._passage_count
                self._passages[at : at + len(piece)] = piece
                self._owner[at : at + len(piece)] = row
                self._held[memory_id] = list(range(at, at + len(piece)))
                self._passage_count += len(piece)

    def copy(self) -> VectorTable:
        """An independent copy (to write while the original keeps changing)."""
        other = VectorTable(self.dimensions)
        count = self._passage_count
        other._fill(
            list(self.ids),
            list(self.revisions),
            self.matrix().copy(),
            self._passages[:count].copy(),
            self._owner[:count].copy(),
        )
        return other

    def _fill(
        self,
        ids: list[str],
        revisions: list[int],
        rows: Matrix,
        passages: Matrix | None = None,
        owners: npt.NDArray[np.intp] | None = None,
    ) -> None:
        """Load an empty table in one step (reading the file: no per-row Python work on the matrix).

        `rows` and `passages` (row j of memory row `owners[j]`) become the table's matrices as
        they are when each is a writable, aligned float32 array (a file's rows, decrypted in
        place): no copy. Otherwise they are copied.
        """
        if len(set(ids)) != len(ids) or len(revisions) != len(ids):
            raise ValueError("rows")
        self._rows = _in_place(rows)
        self._count = len(ids)
        self.ids, self.revisions = ids, revisions
        self._row = {memory_id: n for n, memory_id in enumerate(ids)}
        if passages is None or owners is None or not len(passages):
            return
        if len(owners) != len(passages) or owners.min() < 0 or owners.max() >= len(ids):
            raise ValueError("passages")
        self._passages = _in_place(passages)
        self._owner = np.array(owners, dtype=np.intp)
        self._passage_count = len(passages)
        for at, owner in enumerate(self._owner.tolist()):
            self._held.setdefault(ids[owner], []).append(at)

    def remove(self, memory_id: str) -> None:
        """Forget a memory's vectors (deleted, or changed and to be embedded again)."""
        row = self._row.pop(memory_id, None)
        if row is None:
            return
        self._drop_passages(memory_id)
        last = self._count - 1
        if row != last:
            moved = self.ids[last]
            self._rows[row] = self._rows[last]
            self.ids[row], self.revisions[row] = moved, self.revisions[last]
            self._row[moved] = row
            for at in self._held.get(moved, []):
                self._owner[at] = row
        self.ids.pop()
        self.revisions.pop()
        self._count = last

    def _drop_passages(self, memory_id: str) -> None:
        """Forget a memory's passage rows; each gap is filled by the last passage row."""
        for at in sorted(self._held.pop(memory_id, []), reverse=True):
            last = self._passage_count - 1
            if at != last:
                # The last row is another memory's (this one's later rows went first): it moves up.
                self._passages[at] = self._passages[last]
                owner = int(self._owner[last])
                self._owner[at] = owner
                held = self._held[self.ids[owner]]
                held[held.index(last)] = at
            self._passage_count = last

    def reserve(self, needed: int) -> None:
        """Make room for `needed` rows in all.

        A put that needs more grows the matrix by an eighth (as Python's lists grow), not by
        doubling: at 100,000 memories one more memory must not allocate room for 200,000.
        """
        if needed <= len(self._rows):
            return
        grown = np.zeros(
            (max(needed, len(self._rows) + len(self._rows) // 8, 64), self.dimensions), dtype=np.float32
        )
        grown[: self._count] = self._rows[: self._count]
        self._rows = grown
        if self._shared:
            # The passages were read into the same buffer as the rows: copied too, so it can go.
            self._passages, self._shared = self._passages.copy(), False

    def _reserve_passages(self, needed: int) -> None:
        """Make room for `needed` passage rows in all, growing by an eighth as `reserve` does."""
        if needed <= len(self._passages):
            return
        size = max(needed, len(self._passages) + len(self._passages) // 8, 64)
        grown = np.zeros((size, self.dimensions), dtype=np.float32)
        owner = np.zeros(size, dtype=np.intp)
        grown[: self._passage_count] = self._passages[: self._passage_count]
        owner[: self._passage_count] = self._owner[: self._passage_count]
        self._passages, self._owner = grown, owner
        if self._shared:
            # The rows were read into the same buffer as the passages: copied too, so it can go.
            self._rows, self._shared = self._rows.copy(), False

    # The file -----------------------------------------------------------------

    def plaintext(self, stamp: Stamp) -> bytearray:
        """The file's bytes before sealing, with room for the seal: one copy of the rows, no more.

        Taken under the caller's lock (it reads the table); `seal_and_write` then seals it in place.
        """
        count = self._passage_count
        # The passage rows go to the file grouped by memory, in memory row order, each memory's
        # in the order they were put.
        groups = sorted((self._row[memory_id], rows) for memory_id, rows in self._held.items())
        order = np.array([at for _, rows in groups for at in rows], dtype=np.intp)
        meta = json.dumps(
            {
                "model": stamp.model,
                "manifestSha256": stamp.manifest_sha256,
                "recipe": stamp.recipe,
                "dimensions": stamp.dimensions,
                "rows": [
                    [memory_id, revision]
                    for memory_id, revision in zip(self.ids, self.revisions, strict=True)
                ],
                "passages": [[row, len(rows)] for row, rows in groups],
            },
            separators=(",", ":"),
        ).encode()
        rows = self.matrix()
        at = len(HEADER) + SEALED_PREFIX
        # Spaces after the JSON (still valid JSON) so the rows start at a multiple of 4 in the
        # file: a reader can then use them where they were decrypted, without a copy.
        meta += b" " * (-(at + 4 + len(meta)) % 4)
        size = rows.nbytes + count * self.dimensions * 4
        buffer = bytearray(at + 4 + len(meta) + size + TAG_BYTES)
        buffer[: len(HEADER)] = HEADER
        buffer[at : at + 4 + len(meta)] = struct.pack(">I", len(meta)) + meta
        at += 4 + len(meta)
        out = np.frombuffer(buffer, dtype="<f4", count=size // 4, offset=at).reshape(-1, self.dimensions)
        out[: len(rows)] = rows
        np.take(self._passages[:count], order, axis=0, out=out[len(rows) :])
        return buffer

    def to_bytes(self, key: bytes, account_id: str, stamp: Stamp) -> bytearray:
        """The sealed file content for these vectors."""
        buffer = self.plaintext(stamp)
        seal_in_place(key, memoryview(buffer)[len(HEADER) :], HEADER + account_id.encode())
        return buffer

    @classmethod
    def from_bytes(cls, data: bytes | bytearray, key: bytes, account_id: str, stamp: Stamp) -> VectorTable:
        """The table a file holds, or an empty one when its stamp is not `stamp`.

        A bytearray is decrypted in place (a large file is not copied); bytes are copied first.
        Raises VectorFileError when the file is not one this version wrote under this
        key for this account (damaged, tampered with, swapped in from elsewhere).
        """
        if not data.startswith(HEADER):
            raise VectorFileError("not a vector file of this format")
        blob = memoryview(data if isinstance(data, bytearray) else bytearray(data))[len(HEADER) :]
        try:
            body = open_in_place(key, blob, HEADER + account_id.encode())
        except DecryptionError as error:
            raise VectorFileError("the vector file failed its integrity check") from error
        try:
            (length,) = struct.unpack(">I", body[:4])
            meta = json.loads(bytes(body[4 : 4 + length]))
            made = Stamp(meta["model"], meta["manifestSha256"], meta["recipe"], meta["dimensions"])
            rows = meta["rows"]
            table = cls(stamp.dimensions)
            if made != stamp:
                # Another model, manifest or recipe (a file from before passages too): embedded again.
                return table
            groups = np.array(meta["passages"], dtype=np.intp).reshape(-1, 2)
            if (groups[:, 1] <= 0).any():
                raise ValueError("passages")
            owners = np.repeat(groups[:, 0], groups[:, 1])
            vectors = np.frombuffer(body, dtype="<f4", offset=4 + length)
            vectors = vectors.reshape(len(rows) + len(owners), stamp.dimensions)
            table._fill(
                [str(i) for i, _ in rows],
                [int(r) for _, r in rows],
                vectors[: len(rows)],
                vectors[len(rows) :],
                owners,
            )
            table._shared = len(owners) > 0
        except (ValueError, KeyError, TypeError, struct.error) as error:
            # Authenticated yet unreadable: only a bug of ours could write it; rebuild all the same.
            raise VectorFileError("the vector file's content is malformed") from error
        return table


def _in_place(rows: Matrix) -> Matrix:
    """`rows` itself when it is a writable, aligned, C-contiguous float32 array; else a copy that is."""
    usable = (
        rows.dtype == np.float32 and rows.flags.c_contiguous and rows.flags.aligned and rows.flags.writeable
    )
    return rows if usable else np.ascontiguousarray(rows, dtype=np.float32).copy()


def load(path: Path, key: bytes, account_id: str, stamp: Stamp) -> VectorTable | None:
    """The table in the file at `path`; None when there is none to read; VectorFileError when unusable."""
    try:
        # Into a bytearray of its own, so it is decrypted where it lies (no second copy).
        with path.open("rb") as file:
            data = bytearray(os.fstat(file.fileno()).st_size)
            if file.readinto(data) != len(data):
                raise VectorFileError("the vector file changed while it was read")
    except OSError:
        # Missing, or a path that cannot hold a file: start empty; if it cannot be
        # written either, saving says so (its one line, docs/hybrid.md).
        return None
    return VectorTable.from_bytes(data, key, account_id, stamp)


def save(path: Path, table: VectorTable, key: bytes, account_id: str, stamp: Stamp) -> None:
    """Replace the file at `path` with `table`, atomically, mode 0600 (OSError if it cannot)."""
    seal_and_write(path, table.plaintext(stamp), key, account_id)


def seal_and_write(path: Path, plaintext: bytearray, key: bytes, account_id: str) -> None:
    """Seal a table's `plaintext` in place and replace the file at `path` with it (OSError if it cannot)."""
    seal_in_place(key, memoryview(plaintext)[len(HEADER) :], HEADER + account_id.encode())
    atomic_write(path, plaintext)
