"""The duplicate hint's precision and recall on a set of written pairs, before and after, and by meaning.

The set, tests/data/duplicate_pairs.json: pairs of memories as an agent saves them
(entity, text, tags, keywords), each marked a duplicate (the second says again what
the first says, in other words, often with a detail more) or not (the same topic,
entity, tags or words, another fact: "Allergic to peanuts" and "Allergic to
shellfish"). Both memories of a pair have their own tags and keywords, as two
saves weeks apart would.

What is measured, for each pair:

- after: the hint save_memory gives today. The first memory is saved, then the
  second, on a real store (a local SQLite vault), through `save_with_duplicates`,
  the function save_memory calls; the pair counts as flagged when the answer names
  the first. Both are deleted before the next pair.
- before: the rule the hint had until then, replayed here: the Jaccard share of
  content words over all fields (entity, text, tags, keywords), flagged at 1/2 or more.
- meaning (with the embeddings plugin): the cosine of the two memories' vectors,
  made by the plugin's model from the plugin's own text recipe, at several
  thresholds; and "after, or meaning at a threshold". With the plugin the hint is
  the latter at the plugin's threshold (`ranker.DUPLICATE_COSINE`).

Precision is the share of flagged pairs that are duplicates; recall, the share of
duplicates flagged.

Then the time the hint takes, in process, on an index of `--memories` seeded synthetic
memories (scripts/bench_search.py's corpus: Zipf-distributed words, so common words are
very common, a hard case): for `--lookups` of them, the rule before (replayed here on
the same index, each memory's count of content words over all fields worked out
beforehand, as the index held it) and after, alternating memory by memory; and the
lookup the page's Duplicates makes for each memory (those at least as long). Medians
and p90 (nearest rank). The report goes to docs/benchmarks/duplicates.md.
Run with `python scripts/bench_duplicates.py` (the plugin installed for the meaning rows).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench_search import Corpus

from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.core.models import Revision
from squirrel_mcp.keys import crypto
from squirrel_mcp.search import bm25, duplicates
from squirrel_mcp.search.index import SearchIndex, memory_terms
from squirrel_mcp.server.writing import save_with_duplicates
from squirrel_mcp.storage.local import LocalVault
from squirrel_mcp.text.stopwords import STOPWORDS

try:
    from squirrel_mcp_embeddings.ranker import DUPLICATE_COSINE
except ImportError:  # pragma: no cover - the plugin is optional
    DUPLICATE_COSINE = 0.75

ROOT = Path(__file__).resolve().parent.parent
PAIRS = ROOT / "tests" / "data" / "duplicate_pairs.json"
OUTPUT = ROOT / "docs" / "benchmarks" / "duplicates.md"
THRESHOLDS = (0.6, 0.65, 0.7, 0.75, 0.8, 0.85)


@dataclass(frozen=True)
class Pair:
    """Two memories as saved (entity, text, tags, keywords) and whether the second repeats the first."""

    first: dict[str, Any]
    second: dict[str, Any]
    duplicate: bool


def read_pairs(path: Path) -> list[Pair]:
    """The set, checked: at least 40 duplicates and 40 others."""
    pairs = [Pair(entry["a"], entry["b"], entry["duplicate"]) for entry in json.loads(path.read_text())]
    assert sum(p.duplicate for p in pairs) >= 40, "at least 40 duplicates"
    assert sum(not p.duplicate for p in pairs) >= 40, "at least 40 that are not"
    return pairs


def flagged_after(pairs: Sequence[Pair]) -> list[bool]:
    """Whether save_memory's hint names the first memory when the second is saved, pair by pair."""
    flagged = []
    with tempfile.TemporaryDirectory(prefix="bench-duplicates-") as temp:
        # Cheap key derivation: unlocking is not what is measured.
        cheap = crypto.KdfParams(salt=b"s" * crypto.SALT_BYTES, n=2**14)
        store = MemoryStore.create(LocalVault(Path(temp) / "vault.sqlite3", create=True), "bench", kdf=cheap)
        try:
            for pair in pairs:
                first, _, _ = save_with_duplicates(store, category="note", **pair.first)
                second, _, hints = save_with_duplicates(store, category="note", **pair.second)
                flagged.append(any(hint.memory.id == first.id for hint in hints))
                for memory in (first, second):
                    store.delete(memory.id, reason=None)
        finally:
            store.close()
    return flagged


def _revision(fields: dict[str, Any]) -> Revision:
    stamp = "2026-01-01T00:00:00Z"
    return Revision.model_validate(
        {
            **fields,
            "id": "0" * 16,
            "category": "note",
            "createdAt": stamp,
            "updatedAt": stamp,
            "revision": 1,
            "change": "created",
        }
    )


def before_overlap(pair: Pair) -> float:
    """The former hint's measure: Jaccard share of content words over entity, text, tags and keywords."""
    one, other = (memory_terms(_revision(m))[0].keys() - STOPWORDS for m in (pair.first, pair.second))
    return len(one & other) / len(one | other) if one | other else 0.0


def cosines(pairs: Sequence[Pair]) -> list[float] | None:
    """The cosine of each pair's vectors, as the embeddings plugin makes them; None without the plugin."""
    try:
        from squirrel_mcp_embeddings import embedder
        from squirrel_mcp_embeddings.warmup import recipe
    except ImportError:  # pragma: no cover - the plugin is optional
        return None
    model = embedder.load()
    texts = [recipe(_revision(m)) for pair in pairs for m in (pair.first, pair.second)]
    vectors = model.embed(texts)
    return [float(vectors[2 * n] @ vectors[2 * n + 1]) for n in range(len(pairs))]


def before_lookup(index: SearchIndex, new: Revision, counts: dict[int, int]) -> list[tuple[float, int]]:
    """The former hint, as it ran: Jaccard of all fields' content words, candidates by the rarest words."""
    words = memory_terms(new)[0].keys() - STOPWORDS
    own = index.number(new.id)
    rarest = sorted(words, key=lambda term: (len(index.postings[term]), term))[: len(words) // 2 + 1]
    candidates: set[int] = set().union(*(index.postings[term].docs for term in rarest))
    candidates.discard(-1 if own is None else own)
    shared: Counter[int] = Counter()
    for term in words:
        held = bm25._holding(index, term, [term], candidates)
        shared.update(doc for doc, level in held.items() if level == 1.0)
    found = [(count / (len(words) + counts[doc] - count), doc) for doc, count in shared.items()]
    return sorted(hit for hit in found if hit[0] >= 0.5)[-3:]


def timings(count: int, lookups: int) -> list[tuple[str, list[float]]]:
    """Seconds per lookup: the hint before and after (alternating), and the page's lookup per memory."""
    corpus = Corpus(seed=7)
    memories = [corpus.memory(n) for n in range(count)]
    index = SearchIndex(memories)
    counts = {index.number(m.id) or 0: len(memory_terms(m)[0].keys() - STOPWORDS) for m in memories}
    before: list[float] = []
    after: list[float] = []
    page: list[float] = []
    for memory in memories[:: max(1, count // lookups)][:lookups]:
        for times, lookup in (
            (before, lambda m=memory: before_lookup(index, m, counts)),
            (after, lambda m=memory: duplicates.likely_duplicates(index, m)),
            (page, lambda m=memory: duplicates.likely_duplicates(index, m, limit=count, longer_only=True)),
        ):
            started = time.perf_counter()
            lookup()
            times.append(time.perf_counter() - started)
    return [
        ("before: save_memory's hint", before),
        ("after: save_memory's hint", after),
        ("after: the page's lookup of one memory", page),
    ]


def nearest_rank(values: list[float], share: float) -> float:
    """The value at `share` of the sorted values, by nearest rank."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def scores(pairs: Sequence[Pair], flagged: Sequence[bool]) -> tuple[float, float, int, int]:
    """(precision, recall, duplicates flagged, others flagged)."""
    hits = sum(1 for pair, flag in zip(pairs, flagged, strict=True) if flag and pair.duplicate)
    false = sum(1 for pair, flag in zip(pairs, flagged, strict=True) if flag and not pair.duplicate)
    positives = sum(pair.duplicate for pair in pairs)
    return (hits / (hits + false) if hits + false else 0.0), hits / positives, hits, false


def render(
    pairs: Sequence[Pair],
    rows: list[tuple[str, list[bool]]],
    misses: list[str],
    timed: list[tuple[str, list[float]]],
    args: argparse.Namespace,
) -> str:
    """The report: the set, one row per rule, the pairs missed; then the times."""
    duplicates = sum(p.duplicate for p in pairs)
    lines = [
        "# The duplicate hint: precision and recall",
        "",
        "Written by `scripts/bench_duplicates.py` "
        f"({datetime.now(UTC):%Y-%m-%d}, Python {platform.python_version()}).",
        "",
        f"The set (`tests/data/duplicate_pairs.json`): {len(pairs)} pairs of memories written for",
        f"it, {duplicates} duplicates and {len(pairs) - duplicates} not. Each memory has an entity, a",
        "text, tags and keywords, as an agent saves them; the two of a pair have their own tags and",
        "keywords. A duplicate says the first again in other words, often with a detail more",
        '("Allergic to peanuts", "Is allergic to peanuts; carries an EpiPen"). The others are hard on',
        'purpose: the same topic, the same entity, tags or words, another fact ("Allergic to peanuts",',
        '"Allergic to shellfish"; "Lives in Lyon" of two different people). A set of easy negatives',
        "(unrelated memories) would give every rule a higher precision.",
        "",
        "A pair is flagged when saving the second memory names the first among its possible",
        "duplicates. Precision: the share of flagged pairs that are duplicates; recall: the share",
        "of duplicates flagged. The word rule was chosen on this same set, among a few tried",
        "(Jaccard, Dice and the shorter one's share, of the texts' words, at 0.4 to 0.6), and the",
        "meaning rows are read off it at several thresholds: on pairs written elsewhere every",
        "figure would likely be lower. Without the plugin the hint is the word rule; with it, the",
        f"word rule or meaning ≥ {DUPLICATE_COSINE} (marked **with the plugin**): a hint costs the agent",
        "a look, a missed duplicate a memory said twice, so the union keeps the recall.",
        "",
        "| rule | precision | recall | duplicates flagged | others flagged |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, flagged in rows:
        precision, recall, hits, false = scores(pairs, flagged)
        lines.append(f"| {name} | {precision:.2f} | {recall:.2f} | {hits} of {duplicates} | {false} |")
    lines += ["", "The pairs the word rule (after) gets wrong:", ""]
    lines += [f"- {miss}" for miss in misses] or ["- none"]
    lines += [
        "",
        "## Time",
        "",
        f"Per lookup, on an index of {args.memories:,} synthetic memories (scripts/bench_search.py's",
        f"corpus), {args.lookups} memories looked up, before and after alternating, in one run on a",
        "shared machine: only figures of one run compare. The hint after reads more memories: a",
        "shorter memory may repeat the new one by holding only its own few words, so the rarest",
        "of the new one's words cannot narrow the candidates as they did for a share of both; the",
        "count of each text's words in the index leaves out those that cannot share enough. The",
        "page looks from each memory's shorter side only, and can narrow them.",
        "",
        "| lookup | median | p90 |",
        "|---|---:|---:|",
    ]
    for name, values in timed:
        median, p90 = statistics.median(values), nearest_rank(values, 0.9)
        lines.append(f"| {name} | {median * 1000:.1f} ms | {p90 * 1000:.1f} ms |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Measure every rule on the set; write the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=OUTPUT)
    parser.add_argument("--memories", type=int, default=20_000, help="memories in the timed index")
    parser.add_argument("--lookups", type=int, default=100, help="memories looked up in it")
    args = parser.parse_args(argv)
    pairs = read_pairs(PAIRS)
    after = flagged_after(pairs)
    rows: list[tuple[str, list[bool]]] = [
        ("before: Jaccard of all fields' words ≥ 1/2", [before_overlap(p) >= 0.5 for p in pairs]),
        ("after: the texts, more than half the shorter one's words (words only)", after),
    ]
    meaning = cosines(pairs)
    if meaning is not None:
        for threshold in THRESHOLDS:
            near: Callable[[int], bool] = lambda n, t=threshold: meaning[n] >= t  # noqa: E731
            rows.append((f"meaning: cosine ≥ {threshold}", [near(n) for n in range(len(pairs))]))
            plugin = " (**with the plugin**)" if threshold == DUPLICATE_COSINE else ""
            rows.append(
                (f"after, or meaning ≥ {threshold}{plugin}", [after[n] or near(n) for n in range(len(pairs))])
            )
    else:
        print("the embeddings plugin is not installed: no meaning rows", file=sys.stderr)
    misses = [
        f"{'missed' if pair.duplicate else 'flagged'}: “{pair.first['text']}” / “{pair.second['text']}”"
        for pair, flag in zip(pairs, after, strict=True)
        if flag != pair.duplicate
    ]
    report = render(pairs, rows, misses, timings(args.memories, args.lookups), args)
    args.output.write_text(report)
    print(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
