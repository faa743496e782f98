"""The ranker: words and meaning fused over the vectors embedded so far, near misses, the warm-up's note.

`Hybrid` is a warmup.WarmUp that also ranks. Each search embeds the query and answers
at once with `fusion.ranked` over the lexical candidates and the memories found by
meaning (a cosine at or above the model's floor, live, passing the filters; a long
memory's cosine is its best passage's or its whole text's), then up
to MAX_NEAR_MISSES near misses below the floor when asked. While memories are still
waiting for their vectors, their word matches go to the front of the warm-up's queue
and the answer carries a note saying how far the warm-up is and about how long it
still needs. Vectors busy for longer than LOCK_WAIT: the word ranking, with the note
BUSY (that search only). A runtime failure answers None (lexical search for the rest
of the session) and says so once.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import numpy as np
import numpy.typing as npt

from squirrel_mcp.plugin_api import (
    MAX_NEAR_MISSES,
    Candidate,
    Progress,
    RankedHit,
    Ranking,
    RankOptions,
    Revision,
    age_days,
    decay,
    rank_by_words,
)
from squirrel_mcp_embeddings import fusion, vectors
from squirrel_mcp_embeddings.warmup import WarmUp, recipe

# Of a search's word matches still without a vector, this many are embedded next.
URGENT = 64
# Two memories this close in meaning (the cosine of their vectors) may say the same thing.
# On the written pairs of docs/benchmarks/duplicates.md: precision 0.98 and recall 0.93 by
# meaning alone, where 0.7 flags more that are not and 0.8 misses more that are.
DUPLICATE_COSINE = 0.75
# A search that finds the vectors busy (another search ranking, the file being copied) waits this
# long, then answers by words, saying so: waiting longer could pass the host's 10 s bound on a ranker.
LOCK_WAIT = 1.0
BUSY = (
    "Search by meaning was busy with other searches, so this answer is by words only: a memory "
    "worded differently from the query may not be found. Search again in a moment."
)


def _duration(seconds: float) -> str:
    """A rough duration for a person: "40 s", "3 min", "2 h"."""
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


class Hybrid(WarmUp):
    """The fused ranker over one account's vectors, which WarmUp keeps and fills; thread-safe."""

    def _note(self, progress: Progress) -> str:
        """A search's note while the warm-up is not done: how far, about how long still. Under the lock."""
        left = progress.total - progress.done
        if self._warm_count:
            # The seconds one thread took per memory, shared by the threads that embed side by side.
            seconds = left * self._warm_seconds / self._warm_count / self.threads
            when = f"about {_duration(seconds)} until all are"
        else:
            when = "how long until all are is not known yet"
        return (
            f"Search by meaning is warming up: {progress.done:,} of {progress.total:,} memories are "
            f"searchable by meaning so far, the rest by their words only; {when}."
        )

    def _cosines(self, vector: vectors.Matrix) -> vectors.Matrix:
        """Every memory's cosine to `vector`, the best of its whole text's and its passages'. Under the lock.

        A long memory is read whole this way: a fact anywhere in it is as close to a query as
        the passage holding it.
        """
        cosines: vectors.Matrix = np.clip(self.table.cosines(vector), -1.0, 1.0)
        return cosines

    def cosines(self, query: str, *, passages: bool = True) -> dict[str, float]:
        """The query's cosine to every memory that has a current vector, by memory id.

        Without `passages`, a long memory's cosine is its whole text's alone (for measuring).
        """
        with self._lock:
            vector = self._embedder.embed([query])[0]
            values = self._cosines(vector) if passages else self.table.cosines(vector, passages=False)
            return {memory_id: float(value) for memory_id, value in zip(self.table.ids, values, strict=True)}

    def similar(self, memory: Revision, limit: int) -> list[tuple[str, float]] | None:
        """The other memories DUPLICATE_COSINE or closer to `memory` in meaning, closest first.

        `memory` is embedded here: its own vector may not be made yet. Only memories with
        a current vector count. None (words alone) after a runtime failure, or with the
        vectors busy for LOCK_WAIT.
        """
        if self.failed or not self._lock.acquire(timeout=LOCK_WAIT):
            return None
        try:
            if self._closed:
                return None
            try:
                vector = self._embedder.embed([recipe(memory)])[0]
            except Exception:
                found = None
            else:
                found = self._close_to(vector, memory.id, limit)
        finally:
            self._lock.release()
        if found is None:
            self._runtime_failed()
        return found

    def _close_to(self, vector: vectors.Matrix, own: str, limit: int) -> list[tuple[str, float]]:
        """Up to `limit` memories but `own` whose vector is DUPLICATE_COSINE or closer. Under the lock."""
        cosines = self._cosines(vector)
        close = np.flatnonzero(cosines >= DUPLICATE_COSINE)
        found = []
        for n in close[np.argsort(-cosines[close], kind="stable")].tolist():
            memory_id = self.table.ids[n]
            # Through the reader, as the server checks: a memory gone since must not be named.
            other = self._memories.get(memory_id)
            if memory_id != own and other is not None and other.revision == self.table.revisions[n]:
                found.append((memory_id, float(cosines[n])))
        return found[:limit]

    # Ranking ------------------------------------------------------------------

    def rank(
        self, query: str, candidates: Sequence[Candidate], total: int, options: RankOptions
    ) -> Ranking | None:
        """The fused ranking over the vectors so far; None (lexical) after a runtime failure.

        Never embeds the backlog: while memories are still pending, their word matches are
        ranked by words (no semanticScore), the first URGENT of them go to the front of the
        warm-up's queue, and the answer carries a note and its progress. Vectors busy for
        LOCK_WAIT: the word ranking, with the note BUSY.
        """
        if self.failed:
            return None
        if not self._lock.acquire(timeout=LOCK_WAIT):
            return rank_by_words(candidates, total, options, BUSY)
        try:
            if self._closed:
                return None
            rows = self._current_rows(candidates)
            if self.pending:
                waiting = [c.memory.id for c in candidates if c.memory.id in self.pending]
                # Reversed, so the best word match ends up first in the queue.
                self._queue.extendleft(reversed(waiting[:URGENT]))
            try:
                query_vector = self._embedder.embed([query])[0]
            except Exception:
                ranking = None
            else:
                ranking = self._fused(query_vector, candidates, rows, total, options)
                if self.pending:
                    progress = Progress(len(self.live) - len(self.pending), len(self.live))
                    ranking = dataclasses.replace(ranking, note=self._note(progress), progress=progress)
        finally:
            self._lock.release()
        if ranking is None:
            self._runtime_failed()
        return ranking

    def _current_rows(self, candidates: Sequence[Candidate]) -> npt.NDArray[np.intp]:
        """Learn each word match's revision (`_learn`); the row of its current vector, -1 for none.

        Under the lock. A match learnt already, as most are, costs two look-ups; when one was
        new or changed, its vector may have gone and moved another row, so the rows are read again.
        """
        live, pending, row_of, revisions = self.live, self.pending, self.table.row, self.table.revisions
        rows = []
        learnt = False
        for candidate in candidates:
            memory = candidate.memory
            at = row_of(memory.id)
            held = None if at is None else revisions[at]
            known = live.get(memory.id) is memory
            if not known or not (held == memory.revision or (held is None and memory.id in pending)):
                self._learn(memory)
                learnt = True
            rows.append(-1 if at is None or held != memory.revision else at)
        if learnt:
            rows = []
            for candidate in candidates:
                at = row_of(candidate.memory.id)
                rows.append(-1 if at is None or revisions[at] != candidate.memory.revision else at)
        return np.array(rows, dtype=np.intp)

    def _fused(
        self,
        query_vector: vectors.Matrix,
        candidates: Sequence[Candidate],
        rows: npt.NDArray[np.intp],
        total: int,
        options: RankOptions,
    ) -> Ranking:
        """The fused order over arrays: one number per member, no object per member but the first few.

        `rows`: each word match's row in the vector table, -1 when it has no current vector.
        """
        ids = self.table.ids
        cosines = self._cosines(query_vector)
        members = [candidate.memory for candidate in candidates]
        member_ids = [memory.id for memory in members]
        lexical = set(member_ids)
        word_cosines = np.full(len(members), np.nan)
        held = rows >= 0
        word_cosines[held] = cosines[rows[held]]

        def admissible(n: int) -> Revision | None:
            """A memory found by meaning only that may be returned: live, current vector, filters passed."""
            memory_id = ids[n]
            if memory_id in lexical:
                return None
            # Through the reader, as the server checks: a memory gone since must not be named.
            memory = self._memories.get(memory_id)
            if memory is None or memory.revision != self.table.revisions[n]:
                return None
            if options.filtered and not options.accepts(memory):
                return None
            return memory

        by_meaning = []
        for n in np.flatnonzero(cosines >= self.floor).tolist():
            found = admissible(n)
            if found is not None:
                members.append(found)
                member_ids.append(found.id)
                by_meaning.append(n)
        hits = fusion.ranked(
            member_ids,
            np.array([candidate.lexical_score for candidate in candidates] + [0.0] * len(by_meaning)),
            np.concatenate([word_cosines, cosines[by_meaning].astype(np.float64)]),
            recency_weights(members, options.now),
            np.concatenate([np.arange(len(candidates)), np.full(len(by_meaning), len(candidates))]).astype(
                np.int64
            ),
            floor=self.floor,
            span=self.span,
            limit=options.limit,
        )
        if options.near_misses:
            hits += self._near_misses(cosines, admissible)
        return Ranking(
            hits=[
                RankedHit(hit.memory_id, hit.score, hit.lexical_score, hit.semantic_score, hit.near_miss)
                for hit in hits
            ],
            total=total + len(by_meaning),
            ranking="hybrid",
        )

    def _near_misses(
        self, cosines: vectors.Matrix, admissible: Callable[[int], Revision | None]
    ) -> list[fusion.Scored]:
        """Up to MAX_NEAR_MISSES of the closest memories below the floor that may be returned."""
        found: dict[str, float] = {}
        below = np.flatnonzero(cosines < self.floor)
        for n in below[np.argsort(-cosines[below], kind="stable")].tolist():
            if len(found) == MAX_NEAR_MISSES:
                break
            if admissible(n) is not None:
                found[self.table.ids[n]] = float(cosines[n])
        return fusion.near_misses_of(found, set(), MAX_NEAR_MISSES)


# The length of a day in age_days' arithmetic (base/squirrel_mcp/search/index.py).
SECONDS_PER_DAY = 86_400.0
# A change time as the server writes it (UTC, "Z", to the second, millisecond or microsecond).
_UTC_STAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,6})?Z")


def recency_weights(members: Sequence[Revision], now: datetime) -> fusion.Numbers:
    """Each member's recency weight, its age counted in whole days.

    Whole days: memories changed the same day are equally recent, so their cosine (the
    tie-break) orders them, not a recency weight that differs in the sixth decimal.
    Each (category, days) is weighed once.
    """
    weights: dict[tuple[str, int], float] = {}
    values = []
    for memory, days in zip(members, _whole_days(members, now), strict=True):
        key = (memory.category, days)
        weight = weights.get(key)
        if weight is None:
            weight = weights[key] = decay(memory.category, days)
        values.append(weight)
    return np.array(values, dtype=np.float64)


def _whole_days(members: Sequence[Revision], now: datetime) -> list[int]:
    """math.floor(age_days(memory, now)) of each member, the same integers.

    Stamps in the server's own form are read by numpy all at once, each step the float
    arithmetic age_days does (microseconds / 10**6 / SECONDS_PER_DAY, never below 0);
    any other form (another zone, a basic format) is read by age_days itself.
    """
    stamps = [memory.updatedAt for memory in members]
    if not all(map(_UTC_STAMP.fullmatch, stamps)):
        return [math.floor(age_days(memory, now)) for memory in members]
    changed = np.array([stamp[:-1] for stamp in stamps], dtype="datetime64[us]")
    moment = np.datetime64(now.astimezone(UTC).replace(tzinfo=None), "us")
    microseconds = (moment - changed).astype(np.int64)
    days = np.maximum(0.0, microseconds.astype(np.float64) / 1e6 / SECONDS_PER_DAY)
    whole: list[int] = np.floor(days).astype(np.int64).tolist()
    return whole
