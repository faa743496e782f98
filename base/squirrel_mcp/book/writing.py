"""The memory store's writes: a save, a correction, a delete, a restore, an import (`Writing`).

Each is a new revision, or none when it would change nothing (deleting a deleted
memory, a correction to what the memory already says, the tools' save of a memory
identical to a live one). Each is judged after a pull, under the store's lock,
and appended through its log, which refuses while the log does not extend this
machine's checkpoint. `MemoryStore` (memories.py) is made of these and its reads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from squirrel_mcp.book.errors import ConflictError, MemoryOperationError, Unchanged
from squirrel_mcp.book.ids import CONTENT_ID_PURPOSE, Fields, content_id, created, new_memory_id
from squirrel_mcp.book.importing import HistoryImport
from squirrel_mcp.book.log import Log
from squirrel_mcp.book.view import View
from squirrel_mcp.core.models import MAX_REVISION, Category, Change, Revision, now_iso
from squirrel_mcp.storage import RevisionConflict

# How often `save_once` looks again after its append was refused because another process
# took the same id (saved the same memory) at the same moment; each look sees that save.
SAVE_ATTEMPTS = 8


class Writing:
    """The writes of `MemoryStore`, which holds what they work on (declared here for the type checker)."""

    _lock: threading.RLock
    _log: Log
    _view: View

    def refresh(self) -> None:
        """Pull and decrypt what was appended since the last look (MemoryStore's)."""
        raise NotImplementedError

    def _look(self) -> None:
        """Open the log again if another program changed its file (MemoryStore's)."""
        raise NotImplementedError

    def _append(self, revisions: list[Revision]) -> None:
        # A look first: a write must not go into a file deleted or replaced since the caller's refresh.
        self._look()
        self._log.append(revisions)
        self.refresh()

    def save(
        self,
        *,
        entity: str,
        text: str,
        category: Category,
        tags: list[str],
        keywords: list[str],
        project: str | None = None,
    ) -> Revision:
        """Store a new memory as revision 1 (`save_once` if one just like it may be stored already)."""
        revision = created(new_memory_id(), (entity, text, category, tags, keywords, project))
        with self._lock:
            self._append([revision])
        return revision

    def save_once(
        self,
        *,
        entity: str,
        text: str,
        category: Category,
        tags: list[str],
        keywords: list[str],
        project: str | None = None,
    ) -> tuple[Revision, bool]:
        """The live memory with exactly these fields, else a new one: (that memory, whether it was written).

        What the save_memory tool does, so that a retried save (its answer lost) or an
        agent saving what it saved before stores the fact once. Judged after a pull; two
        processes saving the same memory at the same moment make one memory, since both
        try the same id (`content_id`) and storage takes only one revision 1 of it: the
        other looks again and finds it. The same memory in another project is another memory.
        """
        fields: Fields = (entity, text, category, tags, keywords, project)
        key = self._log.derive_key(CONTENT_ID_PURPOSE)
        with self._lock:
            for _ in range(SAVE_ATTEMPTS):
                self.refresh()
                same = self._identical(fields)
                if same is not None:
                    return same, False
                attempt = 0
                while (memory_id := content_id(key, fields, attempt)) in self._view.histories:
                    attempt += 1
                revision = created(memory_id, fields)
                try:
                    self._append([revision])
                except RevisionConflict:
                    continue
                return revision, True
        raise ConflictError(
            "other processes kept saving this same memory at the same moment; search for it, then retry"
        )

    def _identical(self, fields: Fields) -> Revision | None:
        """The oldest live memory with exactly these fields (project included), or None."""
        for memory in self._view.catalog.live_with_text(fields[1]):
            held = (memory.entity, memory.text, memory.category, memory.tags, memory.keywords, memory.project)
            if held == fields:
                return memory
        return None

    def _next(
        self,
        memory_id: str,
        change: Change,
        expected_revision: int | None,
        *,
        unchanged: str,
        refusal_if_deleted: str | None = None,
        **fields: object,
    ) -> Revision:
        """Write the next revision, with `fields` changed from the newest readable one.

        When that revision already holds every one of `fields` (the reason aside),
        nothing is written: Unchanged, with `unchanged` as its message. A tombstone is
        refused with `refusal_if_deleted` when one is given. It is judged after a pull,
        so a delete made on another machine a second ago counts. The new revision's
        number is one above the highest stored, readable or not: storage takes only
        the next number, and an unreadable newest revision must not block every later
        change. Past MAX_REVISION there is no next number.
        """
        with self._lock:
            self.refresh()
            latest = self._view.latest(memory_id)
            number = self._view.histories[memory_id].latest_number() + 1
            if all(getattr(latest, name) == value for name, value in fields.items() if name != "reason"):
                # Before the revision check: a correction retried after its answer was lost
                # finds its own revision there, and is told so rather than refused.
                raise Unchanged(f"memory {memory_id} {unchanged}", latest)
            if latest.deleted and refusal_if_deleted is not None:
                raise MemoryOperationError(f"memory {memory_id} {refusal_if_deleted}")
            if number > MAX_REVISION:
                raise MemoryOperationError(
                    f"memory {memory_id} has a revision {MAX_REVISION}, the highest a record can have, "
                    "so it cannot be changed any more; save what it should say as a new memory"
                )
            if expected_revision is not None and latest.revision != expected_revision:
                raise ConflictError(
                    f"memory {memory_id} is at revision {latest.revision}, not {expected_revision}: "
                    "it changed since you read it; read it again with get_memory, then retry"
                )
            values = latest.model_dump() | fields
            values.update(revision=number, updatedAt=now_iso(), change=change)
            revision = Revision.model_validate(values)
            try:
                self._append([revision])
            except RevisionConflict:
                self.refresh()
                raise ConflictError(
                    f"memory {memory_id} was changed by another process (or machine) at the same moment; "
                    "read it again with get_memory, then retry"
                ) from None
            return revision

    def update(
        self,
        memory_id: str,
        *,
        changes: dict[str, object],
        reason: str | None,
        expected_revision: int | None = None,
    ) -> Revision:
        """A correction: the next revision with `changes` applied; the old one stays.

        Unchanged, writing nothing, when the memory is live and already holds every change.
        """
        return self._next(
            memory_id,
            "corrected",
            expected_revision,
            unchanged="already says this; nothing was written",
            refusal_if_deleted="is deleted; restore_memory it first",
            reason=reason,
            deleted=False,
            **changes,
        )

    def delete(self, memory_id: str, *, reason: str | None, expected_revision: int | None = None) -> Revision:
        """A tombstone revision; restore undoes it. Unchanged, writing nothing, when it is deleted already.

        With `expected_revision`, refused (ConflictError) when the memory is at another one.
        """
        return self._next(
            memory_id,
            "deleted",
            expected_revision,
            unchanged="is already deleted",
            deleted=True,
            reason=reason,
        )

    def restore(self, memory_id: str, *, expected_revision: int | None = None) -> Revision:
        """Undo a delete: a new revision with the content back; Unchanged (nothing written) when live.

        With `expected_revision`, refused (ConflictError) when the memory is at another one.
        """
        return self._next(
            memory_id, "restored", expected_revision, unchanged="is not deleted", deleted=False, reason=None
        )

    def import_history(self, revisions: list[Revision]) -> tuple[int, int, list[int]]:
        """Add an exported memory's revisions that this account lacks (`import_histories` of one)."""
        return self.import_histories([revisions])[0]

    def import_histories(
        self, histories: Sequence[list[Revision]], progress: Callable[[int, int], None] | None = None
    ) -> list[tuple[int, int, list[int]]]:
        """Add the revisions of exported memories that this account lacks, in few appends.

        Returns, for each memory in the order given, (added, already present,
        conflicting revision numbers): see importing.HistoryImport.
        """
        with self._lock:
            self.refresh()
            importing = HistoryImport(self._view, self._log, self.refresh, self._append)
            results = importing.run(histories, progress)
            self.refresh()
        if progress is not None:
            progress(len(histories), len(histories))
        return results
