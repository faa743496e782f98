"""What a ranker is given and what it answers: the data of the `rank_memories` hook.

These types are the contract between the server and ranking plugins (the
default lexical one and any third party's). `check_ranking` is the server's side
of it: a plugin's answer is used only when every hit names a memory the search
may return and every number is one the tool's output can carry.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from squirrel_mcp.core.models import Revision

RankingLabel = Literal["lexical", "hybrid"]
# At most this many near misses, as the search_memory tool promises.
MAX_NEAR_MISSES = 3
# A ranker's note is one short paragraph for the agent; a longer one is refused.
MAX_NOTE_CHARS = 500


@dataclass(frozen=True)
class Candidate:
    """A memory that matches the query by words, with its lexical numbers."""

    memory: Revision
    score: float
    """BM25 times the category's recency decay: the lexical rank order."""
    lexical_score: float
    """The share of the query's content words the memory holds, 0 to 1."""


@dataclass(frozen=True)
class RankOptions:
    """What the agent asked search_memory for, besides the query."""

    limit: int
    """Most hits to return (near misses aside)."""
    near_misses: bool
    """True when the agent asked for up to MAX_NEAR_MISSES closest non-matches too."""
    category: str | None
    """Only memories of this category, or None for every category."""
    tags: tuple[str, ...]
    """Only memories carrying every one of these tags (compared ignoring case)."""
    now: datetime
    """The search's clock, for recency decay."""
    projects: frozenset[str | None] | None = None
    """Only memories of these projects (None in it: those with no project), or None for every project."""

    @property
    def filtered(self) -> bool:
        """Whether a category, tag or project filter is set (when not, every memory passes)."""
        return self.category is not None or bool(self.tags) or self.projects is not None

    def accepts(self, memory: Revision) -> bool:
        """Whether a memory passes the category, tag and project filters above."""
        if self.category is not None and memory.category != self.category:
            return False
        if self.projects is not None and memory.project not in self.projects:
            return False
        held = {tag.casefold() for tag in memory.tags}
        return all(tag.casefold() in held for tag in self.tags)


@dataclass(frozen=True)
class RankedHit:
    """One hit of a ranker's answer; the server fills in the memory's fields."""

    memory_id: str
    score: float
    """Orders this response only; higher ranks first."""
    lexical_score: float
    """The candidate's own lexical_score (0 for a memory that is not a candidate)."""
    semantic_score: float | None = None
    """Cosine similarity to the query, -1 to 1, or None when the ranker has none."""
    near_miss: bool = False
    """True on a near miss: a candidate to check, not an answer."""


@dataclass(frozen=True)
class Progress:
    """How far a ranker's preparation is (memories embedded so far out of all of them)."""

    done: int
    total: int


@dataclass(frozen=True)
class Ranking:
    """A ranker's answer: hits in rank order (matches, then near misses), the match count, the label."""

    hits: list[RankedHit]
    total: int
    """How many memories match in all (near misses not counted)."""
    ranking: RankingLabel
    """"lexical" for word matching alone, "hybrid" when another signal (meaning) took part."""
    note: str | None = None
    """A sentence for the agent about this answer (e.g. that meaning covers only part of the
    memories yet), added to the result's note; plain text, at most MAX_NOTE_CHARS, never memory text."""
    progress: Progress | None = None
    """While the ranker is still preparing (embedding memories), how far it is: the server sends it
    as a progress notification to a request that asked for progress. None once it is ready."""


def rank_by_words(
    candidates: Sequence[Candidate], total: int, options: RankOptions, note: str | None = None
) -> Ranking:
    """The candidates in lexical order, cut to the limit: the built-in ranker's answer, with `note`.

    For a ranker that cannot rank by its own signal for this one search (busy, still
    preparing) and says so: its answer is then exactly what word search would give.
    """
    return Ranking(
        hits=[
            RankedHit(candidate.memory.id, candidate.score, candidate.lexical_score)
            for candidate in candidates[: options.limit]
        ],
        total=total,
        ranking="lexical",
        note=note,
    )


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _progress(value: object) -> bool:
    return (
        isinstance(value, Progress)
        and all(isinstance(n, int) and not isinstance(n, bool) for n in (value.done, value.total))
        and 0 <= value.done <= value.total
    )


def check_ranking(
    answer: object,
    candidates: Sequence[Candidate],
    options: RankOptions,
    lookup: Callable[[str], Revision | None],
) -> str | None:
    """Why a ranker's answer cannot be used, or None when it can.

    `lookup` gives the live memory with an id (None when there is none). The reason
    names the rule broken, never an id, a score or any text.
    """
    if not isinstance(answer, Ranking):
        return f"returned a {type(answer).__name__}, not a Ranking"
    if answer.ranking not in ("lexical", "hybrid"):
        return "returned an unknown ranking label"
    if not isinstance(answer.total, int) or isinstance(answer.total, bool) or answer.total < 0:
        return "returned a total that is not a count"
    if not isinstance(answer.hits, list):
        return "returned hits that are not a list"
    note = answer.note
    if note is not None and not (isinstance(note, str) and 0 < len(note) <= MAX_NOTE_CHARS):
        return f"returned a note that is not a text of 1 to {MAX_NOTE_CHARS} characters"
    if answer.progress is not None and not _progress(answer.progress):
        return "returned a progress that is not a Progress of two counts, done at most total"
    lexical = {candidate.memory.id: candidate.lexical_score for candidate in candidates}
    seen: set[str] = set()
    matches = misses = 0
    previous = math.inf
    for hit in answer.hits:
        if not isinstance(hit, RankedHit):
            return "returned a hit that is not a RankedHit"
        if not isinstance(hit.memory_id, str) or hit.memory_id in seen:
            return "returned a memory twice or an id that is not a string"
        seen.add(hit.memory_id)
        memory = lookup(hit.memory_id)
        if memory is None or not options.accepts(memory):
            return "returned an unknown memory id or one the filters exclude"
        if not (_number(hit.score) and _number(hit.lexical_score)):
            return "returned a score that is not a finite number"
        if hit.semantic_score is not None and not (
            _number(hit.semantic_score) and -1 <= hit.semantic_score <= 1
        ):
            return "returned a semantic score outside -1 to 1"
        if abs(hit.lexical_score - lexical.get(hit.memory_id, 0.0)) > 1e-9:
            return "returned a lexical score that is not the candidate's"
        if not isinstance(hit.near_miss, bool):
            return "returned a near-miss flag that is not a bool"
        if hit.near_miss:
            misses += 1
        elif misses:
            return "returned a match after a near miss"
        else:
            if hit.score > previous:
                return "returned matches out of score order"
            previous = hit.score
            matches += 1
    if matches > options.limit:
        return "returned more hits than the limit"
    if misses > (MAX_NEAR_MISSES if options.near_misses else 0):
        return "returned near misses that were not asked for"
    if answer.total < matches:
        return "returned a total below its hit count"
    return None
