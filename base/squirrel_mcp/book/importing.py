"""An import of exported histories into the store, in few appends (MemoryStore.import_histories).

A revision already here with the same content counts as present, so an import can be
run twice; one here with different content is a conflict and is left alone. The
missing revisions of many memories go together, at most IMPORT_BATCH records per
append (what the sync contract takes in one request; a memory with a longer history
goes alone, in order). An append refused because a record it holds appeared meanwhile
(another process wrote one of its memories) is redone memory by memory after a pull,
each judged against what storage then holds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from squirrel_mcp.book.log import Log
from squirrel_mcp.book.view import View
from squirrel_mcp.core.models import Revision
from squirrel_mcp.storage import RevisionConflict
from squirrel_mcp.storage.wire import MAX_RECORDS_PER_APPEND

# The most records one append of an import holds: what the sync contract takes in one request.
IMPORT_BATCH = MAX_RECORDS_PER_APPEND
# For each memory of an import: (revisions added, revisions already present, conflicting numbers).
Outcome = tuple[int, int, list[int]]


@dataclass
class HistoryImport:
    """One import, run under the store's lock after a pull: its view, its log and its writes."""

    view: View
    log: Log
    refresh: Callable[[], None]
    append: Callable[[list[Revision]], None]

    def run(
        self, histories: Sequence[list[Revision]], progress: Callable[[int, int], None] | None
    ) -> list[Outcome]:
        """Each memory's outcome, in the order given; `progress` hears of each append (done, of)."""
        results: list[Outcome] = []
        batch: list[Revision] = []
        members: list[int] = []
        for number, revisions in enumerate(histories):
            missing, present, conflicts = self.view.compare(revisions)
            if missing and batch and len(batch) + len(missing) > IMPORT_BATCH:
                self._append_batch(batch, members, histories, results)
                batch, members = [], []
                if progress is not None:
                    progress(number, len(histories))
            results.append((len(missing), present, conflicts))
            if missing:
                batch.extend(missing)
                members.append(number)
        self._append_batch(batch, members, histories, results)
        return results

    def _append_batch(
        self,
        batch: list[Revision],
        members: list[int],
        histories: Sequence[list[Revision]],
        results: list[Outcome],
    ) -> None:
        """Append one batch; on a conflict, redo its memories one by one."""
        if not batch:
            return
        try:
            self.log.append(batch)
        except RevisionConflict:
            self.refresh()
            for number in members:
                missing, present, conflicts = self.view.compare(histories[number])
                if missing:
                    self.append(missing)
                results[number] = (len(missing), present, conflicts)
