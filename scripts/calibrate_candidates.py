"""Which memories the fused ranking should see: caps on its word and meaning candidates, measured.

Today the plugin ranks every word match and every memory at or above the floor
(docs/hybrid.md). This script measures, on the same numbers the ranker would get, what
the fused order gives when it sees only

- every word match holding every query word, and the first W word matches in the
  lexical order (BM25 times recency), and
- the M memories with the highest cosine at or above the floor,

for a grid of (W, M), side by side with no cap (today's order) and with words alone.
The numbers come from the real thing: each vault opened in this process with the
embeddings plugin and the real model (its vectors read from the vector file the
benchmark's server left, or embedded here for LoCoMo), the word matches from the index's
BM25 search, the cosines from the plugin (a long memory's best passage or whole text),
and the order from `squirrel_mcp_embeddings.fusion.ranked`, the ranker's own function.

- LongMemEval: the vaults `python scripts/bench_longmemeval.py --keep DIR` kept, scored
  as docs/benchmarks/longmemeval.md says;
- LoCoMo: its conversations (scripts/bench_locomo.py's data), every turn a memory, scored
  against the original key and the corrected one.

Writes docs/benchmarks/candidates.md (or --report). Nothing here changes what the
server does: it says what a cap would do.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import bench_locomo
import bench_longmemeval
import numpy as np
from bench_stdio import LIMIT, PASSPHRASE
from calibrate_floor import Vault, conversation_memories, vault_of, warm

from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.search import bm25
from squirrel_mcp.storage.local import LocalVault
from squirrel_mcp_embeddings import fusion
from squirrel_mcp_embeddings.ranker import recency_weights

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "docs" / "benchmarks" / "candidates.md"
# Caps, in results asked for (LIMIT): None is no cap.
WORD_CAPS: tuple[float | None, ...] = (None, 0.8, 1.0, 1.2, 1.5, 2.0, 3.0)
MEANING_CAPS: tuple[float | None, ...] = (None, 0.5, 1.0, 2.0, 5.0)
LOCOMO_MEASURES = ("hit@1", "hit@5", "hit@10", "recall@5", "recall@10", "MRR")


@dataclass(frozen=True)
class Numbers:
    """One search's inputs to the ranker: word matches in lexical order, and every memory's cosine."""

    words: list[tuple[str, float]]
    """(memory id, lexicalScore), best word match first."""
    cosines: dict[str, float]
    decays: dict[str, float]
    """Each memory's recency weight as the ranker counts it (whole days); missing: 1."""
    scores: dict[str, float] = field(default_factory=dict)
    """Each word match's lexical score (BM25 times recency), which orders `words`."""
    whole: dict[str, float] = field(default_factory=dict)
    """Each memory's cosine by its whole text's vector alone (a long memory's passages left out)."""


def numbers_of(vault: Vault, query: str) -> Numbers:
    """What the ranker gets for `query` in `vault`: all the word matches, all the cosines, the ages."""
    hits = bm25.search(vault.store.index, query, vault.now).hits
    cosines = vault.plugin.hybrid.cosines(query)
    live = [vault.store.live(memory_id) for memory_id in cosines.keys() | {hit.memory.id for hit in hits}]
    members = [memory for memory in live if memory is not None]
    weights = recency_weights(members, vault.now).tolist()
    decays = dict(zip((memory.id for memory in members), weights, strict=True))
    whole = vault.plugin.hybrid.cosines(query, passages=False)
    words = [(hit.memory.id, hit.lexical_score) for hit in hits]
    return Numbers(words, cosines, decays, {hit.memory.id: hit.score for hit in hits}, whole)


def capped_order(
    numbers: Numbers, *, floor: float, span: float, words: int | None, meaning: int | None, limit: int
) -> list[str]:
    """The first `limit` ids of the fused order over the capped members (None: no cap).

    Members: the first `words` word matches and every one holding every query word, then the
    `meaning` closest memories at or above the floor (a word match among them keeps its
    lexicalScore).
    """
    lexical = dict(numbers.words)
    order = [memory_id for memory_id, _ in numbers.words]
    members = list(order) if words is None else order[:words]
    members += [memory_id for memory_id in order[len(members) :] if fusion.every_word(lexical[memory_id])]
    close = sorted(
        (memory_id for memory_id, cosine in numbers.cosines.items() if cosine >= floor),
        key=lambda memory_id: (-numbers.cosines[memory_id], memory_id),
    )
    taken = set(members)
    members += [memory_id for memory_id in close[:meaning] if memory_id not in taken]
    rank_in_words = {memory_id: n for n, memory_id in enumerate(order)}
    hits = fusion.ranked(
        members,
        np.array([lexical.get(memory_id, 0.0) for memory_id in members], dtype=np.float64),
        np.array([numbers.cosines.get(memory_id, np.nan) for memory_id in members], dtype=np.float64),
        np.array([numbers.decays.get(memory_id, 1.0) for memory_id in members], dtype=np.float64),
        np.array([rank_in_words.get(memory_id, len(order)) for memory_id in members], dtype=np.int64),
        floor=floor,
        span=span,
        limit=limit,
    )
    return [hit.memory_id for hit in hits]


@dataclass(frozen=True)
class Searched:
    """One question: what the ranker gets, and how to score a list of memory ids against its key."""

    numbers: Numbers
    held: dict[str, frozenset[str]]
    """memory id -> the keys it holds (LongMemEval's turn keys, LoCoMo's dia_ids)."""
    question: bench_longmemeval.Question | bench_locomo.Question


def longmemeval_searches(kept: Path, data: Path) -> Iterator[Searched]:
    """Each question `kept` holds a whole vault of (its memory-to-turn map written), in file order."""
    questions = {path.stem: path for path in bench_longmemeval.question_files(data)}
    for held_path in sorted(kept.glob("*.held.json")):
        question_id = held_path.name.removesuffix(".held.json")
        if question_id not in questions:
            continue
        question = bench_longmemeval.load(questions[question_id])
        held = {memory_id: frozenset(keys) for memory_id, keys in json.loads(held_path.read_text()).items()}
        storage = LocalVault(kept / f"{question_id}.sqlite3", create=False)
        try:
            store = MemoryStore.unlock(storage, PASSPHRASE)
            # Saved through the server today: the memories' age is counted from now, as it searched.
            with warm(store, kept / f"{question_id}.cache", datetime.now(UTC)) as vault:
                numbers = numbers_of(vault, question.text)
            store.close()
        finally:
            storage.close()
        yield Searched(numbers, held, question)
        print(f"LongMemEval {question_id}: read", flush=True)


def locomo_searches(data: Path) -> Iterator[Searched]:
    """Every question of categories 1-4 of every conversation, each turn a memory."""
    for path in bench_locomo.conversation_files(data):
        conversation = bench_locomo.load(path)
        memories, dia = conversation_memories(conversation)
        held = {memory_id: frozenset({dia_id}) for memory_id, dia_id in dia.items()}
        with vault_of(memories) as vault:
            found = [(question, numbers_of(vault, question.text)) for question in conversation.questions]
        yield from (Searched(numbers, held, question) for question, numbers in found)
        print(f"LoCoMo {conversation.name}: read", flush=True)


def measures(searches: Sequence[Searched], ranked: Sequence[list[str]]) -> dict[str, float]:
    """The mean of each measure over the searches, for each search's ranked ids."""
    rows = []
    for searched, ids in zip(searches, ranked, strict=True):
        keys = [searched.held.get(memory_id, frozenset()) for memory_id in ids]
        question = searched.question
        if isinstance(question, bench_longmemeval.Question):
            rows.append(bench_longmemeval.scores(keys, question))
            continue
        row = {}
        for which in bench_locomo.KEYS:
            scores = bench_locomo.question_scores(keys, question.key(which))
            row.update({f"{name} ({which})": scores[name] for name in LOCOMO_MEASURES})
        rows.append(row)
    return {name: statistics.fmean(row[name] for row in rows) for name in rows[0]} if rows else {}


def cap(share: float | None) -> int | None:
    """A cap in results asked for, as a number of memories (None: no cap)."""
    return None if share is None else max(1, round(share * LIMIT))


def grid_rows(searches: Sequence[Searched], floor: float, span: float) -> dict[str, dict[str, float]]:
    """Words alone, then the fused order for each (word cap, meaning cap): the measures of each."""
    rows = {"words alone": measures(searches, [[m for m, _ in s.numbers.words[:LIMIT]] for s in searches])}
    for words in WORD_CAPS:
        for meaning in MEANING_CAPS:
            ranked = [
                capped_order(
                    s.numbers, floor=floor, span=span, words=cap(words), meaning=cap(meaning), limit=LIMIT
                )
                for s in searches
            ]
            rows[f"{label(words)} | {label(meaning)}"] = measures(searches, ranked)
    return rows


def label(share: float | None) -> str:
    return "all" if share is None else f"{cap(share)}"


def table(rows: dict[str, dict[str, float]], today: dict[str, float]) -> list[str]:
    """A markdown table, a row per ranking, a column per measure; `*` marks a figure under today's."""
    names = list(today)
    lines = [
        "| word matches seen | closest seen | " + " | ".join(names) + " | under today's |",
        "|---|---|" + "---:|" * (len(names) + 1),
    ]
    for key, row in rows.items():
        head = "words alone | -" if key == "words alone" else key
        below = [row[name] < today[name] - 1e-9 for name in names]
        cells = [f"{row[name]:.3f}" + ("*" if low else "") for name, low in zip(names, below, strict=True)]
        lines.append(f"| {head} | " + " | ".join(cells) + f" | {sum(below)} |")
    return lines


def not_below(row: dict[str, float], other: dict[str, float], names: Sequence[str]) -> bool:
    return all(row[name] >= other[name] - 1e-9 for name in names)


def report(
    lme: dict[str, dict[str, float]],
    locomo: dict[str, dict[str, float]],
    counts: tuple[int, int],
    args: argparse.Namespace,
) -> str:
    """docs/benchmarks/candidates.md: the method, both tables, and what holds across both."""
    today = "all | all"
    lme_today, locomo_today = lme[today], locomo[today]
    at_five = [name for name in lme_today if name.endswith("@5")]
    both = [
        key
        for key in lme
        if key not in (today, "words alone")
        and not_below(lme[key], lme_today, list(lme_today))
        and not_below(locomo[key], locomo_today, list(locomo_today))
        and (lme[key] != lme_today or locomo[key] != locomo_today)
    ]
    beat_words = [
        key for key in lme if key != "words alone" and not_below(lme[key], lme["words alone"], at_five)
    ]
    lines = [
        "# Which memories the fused ranking sees",
        "",
        f"Written by `python scripts/calibrate_candidates.py --kept DIR` on {datetime.now(UTC):%Y-%m-%d}.",
        "What the fused order (docs/hybrid.md) gives when the ranker sees only the first W word",
        "matches in the lexical order (and every one holding every query word) and the M closest",
        "memories at or above the floor,",
        f"against today's (every word match and every memory at or above the floor), limit {LIMIT}, at the",
        f"model's floor {args.floor} and span {args.span}. The numbers are the ranker's own (the index's",
        "word matches, the plugin's cosines with the real model, a long memory's best passage or whole",
        "text) and the order is `fusion.ranked`'s; a figure marked `*` is under today's.",
        "",
        f"## LongMemEval, {counts[0]} questions",
        "",
        "The vaults `python scripts/bench_longmemeval.py --keep DIR` kept; measures as in",
        "longmemeval.md.",
        "",
        *table(lme, lme_today),
        "",
        f"## LoCoMo, {counts[1]} questions",
        "",
        "Categories 1-4 of the conversations bench_locomo.py reads, each turn a memory, against",
        "LoCoMo's key (original) and the audit's corrections (corrected).",
        "",
        *table(locomo, locomo_today),
        "",
        "## What holds on both",
        "",
        "- Caps (W | M) with no figure under today's on either set and one above it: "
        + (", ".join(f"`{key}`" for key in both) if both else "none")
        + ".",
        "- Rankings at least as good as words alone on every LongMemEval measure at 5: "
        + (", ".join(f"`{key}`" for key in beat_words) if beat_words else "none")
        + ".",
        "",
        "The server's ranking is not changed by this script. Of a grid this size, some cell does",
        "better on the very questions it was measured on by chance alone: a cap is worth adopting",
        "when its gain holds on questions it was not chosen on.",
        "",
    ]
    return "\n".join(lines)


def data_arguments(parser: argparse.ArgumentParser) -> None:
    """--kept, --data and --locomo: where the searches' vaults and questions are."""
    parser.add_argument(
        "--kept", type=Path, required=True, help="the vaults bench_longmemeval.py --keep left"
    )
    parser.add_argument(
        "--data", type=Path, default=bench_longmemeval.DATA, help="LongMemEval's question files"
    )
    parser.add_argument("--locomo", type=Path, default=bench_locomo.DATA, help="LoCoMo's conversations")


def both_searches(args: argparse.Namespace, script: str) -> tuple[list[Searched], list[Searched]] | None:
    """LongMemEval's kept searches and LoCoMo's, or None (said on stderr) when either set is empty."""
    lme_searches = list(longmemeval_searches(args.kept, args.data))
    locomo_searched = list(locomo_searches(args.locomo))
    if not lme_searches or not locomo_searched:
        print(f"{script}: needs kept LongMemEval vaults and LoCoMo's conversations", file=sys.stderr)
        return None
    return lme_searches, locomo_searched


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    data_arguments(parser)
    parser.add_argument("--floor", type=float, default=0.35)
    parser.add_argument("--span", type=float, default=0.03)
    parser.add_argument("--report", type=Path, default=REPORT)
    args = parser.parse_args(argv)
    searched = both_searches(args, "calibrate_candidates")
    if searched is None:
        return 1
    lme_searches, locomo_searches_ = searched
    lme = grid_rows(lme_searches, args.floor, args.span)
    locomo = grid_rows(locomo_searches_, args.floor, args.span)
    text = report(lme, locomo, (len(lme_searches), len(locomo_searches_)), args)
    args.report.write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
