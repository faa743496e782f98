"""What changing the fused formula itself would do: measured side by side, nothing shipped.

The floor, the span and the candidates the ranker sees do not bring hybrid search up to
words alone on LongMemEval's turn measures (docs/benchmarks/floor-longmemeval.md,
docs/benchmarks/candidates.md). What remains are changes to what docs/hybrid.md states as
the formula:

- the word part: lexicalScore (the share of the query's words a memory holds, whatever
  its length) or the lexical order's own score (BM25 times recency, which weighs a long
  text's words down) divided by the query's best, or half of each;
- the weight of the word part (0.3 today);
- a long memory's cosine: the best of its passages' and its whole text's (today), its
  whole text's alone (as before passages), or its best passage's less a discount.

Each option keeps the rest as it is: members are every word match and every memory at or
above the floor; a hit holding every query word scores 0.5 + fused / 2, any other
fused / 2; ties go to the higher cosine, then the lexical order, then the id. The first
option is today's formula, and tests/test_calibrate_candidates.py checks that it orders as the
ranker does. The numbers are calibrate_candidates.py's (the ranker's own, with the real
model) on the LongMemEval vaults `bench_longmemeval.py --keep DIR` kept, LoCoMo's
conversations and the recall gate's corpus. Writes docs/benchmarks/fusion-options.md.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import bench_locomo
import bench_longmemeval
from bench_stdio import LIMIT
from calibrate_candidates import (
    Numbers,
    Searched,
    both_searches,
    data_arguments,
    measures,
    numbers_of,
)
from calibrate_floor import ROOT, vault_of

from squirrel_mcp_embeddings import fusion
from tests.recall.corpus import CORPUS, SETS, measure, revision

REPORT = ROOT / "docs" / "benchmarks" / "fusion-options.md"
FLOOR, SPAN = 0.35, 0.03


@dataclass(frozen=True)
class Option:
    """One formula: its word part, the word part's weight, a long memory's cosine, the span."""

    name: str
    words: str = "share"
    """"share" (lexicalScore), "bm25" (the lexical score over the query's best) or "half" (half each)."""
    weight: float = fusion.WEIGHT
    discount: float | None = 0.0
    """A long memory's cosine: max(whole text, best passage - discount); None: whole text alone."""
    span: float = SPAN


OPTIONS = (
    Option("today"),
    Option("whole text only", discount=None),
    Option("best passage - 0.1", discount=0.1),
    Option("weight 0.5", weight=0.5),
    Option("weight 0.8", weight=0.8),
    Option("weight 0.8, span 0.1", weight=0.8, span=0.1),
    Option("bm25, weight 0.7", words="bm25", weight=0.7),
    Option("bm25, weight 0.8, span 0.1", words="bm25", weight=0.8, span=0.1),
    Option("half, weight 0.8", words="half", weight=0.8),
    Option("half, weight 0.8, span 0.1", words="half", weight=0.8, span=0.1),
)


def word_parts(numbers: Numbers, words: str) -> dict[str, float]:
    """Each word match's word part under `words`."""
    shares = dict(numbers.words)
    best = max(numbers.scores.values(), default=0.0)
    relative = {memory_id: score / best if best > 0 else 0.0 for memory_id, score in numbers.scores.items()}
    if words == "share":
        return shares
    if words == "bm25":
        return {memory_id: relative.get(memory_id, 0.0) for memory_id in shares}
    return {memory_id: (share + relative.get(memory_id, 0.0)) / 2 for memory_id, share in shares.items()}


def cosines_of(numbers: Numbers, discount: float | None) -> dict[str, float]:
    """Each memory's cosine as the option reads a long memory (a short one's is its whole text's)."""
    if discount is None:
        return {
            memory_id: numbers.whole.get(memory_id, cosine) for memory_id, cosine in numbers.cosines.items()
        }
    return {
        memory_id: max(numbers.whole.get(memory_id, cosine), cosine - discount)
        for memory_id, cosine in numbers.cosines.items()
    }


def option_order(numbers: Numbers, option: Option, *, floor: float = FLOOR, limit: int = LIMIT) -> list[str]:
    """The first `limit` memory ids in `option`'s order."""
    shares = dict(numbers.words)
    parts = word_parts(numbers, option.words)
    cosines = cosines_of(numbers, option.discount)
    rank_in_words = {memory_id: n for n, (memory_id, _) in enumerate(numbers.words)}
    members = list(shares) + sorted(m for m, cosine in cosines.items() if cosine >= floor and m not in shares)

    def key(memory_id: str) -> tuple[float, float, int, str]:
        cosine = cosines.get(memory_id)
        meaning = fusion.semantic_part(cosine, floor, option.span) * numbers.decays.get(memory_id, 1.0)
        fused = option.weight * parts.get(memory_id, 0.0) + (1 - option.weight) * meaning
        score = fusion.EVERY_WORD + fused / 2 if fusion.every_word(shares.get(memory_id, 0.0)) else fused / 2
        tie = cosine if cosine is not None else -2.0
        return (-score, -tie, rank_in_words.get(memory_id, len(rank_in_words)), memory_id)

    return sorted(members, key=key)[:limit]


def orders() -> dict[str, Callable[[Numbers], list[str]]]:
    """Words alone (the lexical order), then each option's order."""
    found: dict[str, Callable[[Numbers], list[str]]] = {
        "words alone": lambda numbers: [memory_id for memory_id, _ in numbers.words[:LIMIT]]
    }
    for option in OPTIONS:
        found[option.name] = lambda numbers, option=option: option_order(numbers, option)
    return found


def rows_of(searches: Sequence[Searched]) -> dict[str, dict[str, float]]:
    """The mean of each measure, for words alone and each option."""
    return {
        name: measures(searches, [order(s.numbers) for s in searches]) for name, order in orders().items()
    }


def corpus_rows() -> dict[str, dict[str, float]]:
    """Paraphrase and exact-word recall@5 on the recall gate's corpus, for words alone and each option."""
    with vault_of([revision(memory) for memory in CORPUS]) as vault:
        queries = {name: SETS[name] for name in ("paraphrase", "exact")}
        numbers = {
            name: [numbers_of(vault, query["query"]) for query in sets] for name, sets in queries.items()
        }
    return {
        label: {
            f"{name} recall@5": measure(queries[name], [order(n) for n in numbers[name]])["recall@5"]
            for name in queries
        }
        for label, order in orders().items()
    }


def table(rows: dict[str, dict[str, float]], names: Sequence[str]) -> list[str]:
    """A row per option, a column per measure; `*` marks a figure under today's, `+` one above words alone."""
    lines = ["| formula | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for key, row in rows.items():
        cells = []
        for name in names:
            mark = "*" if row[name] < rows["today"][name] - 1e-9 else ""
            words = rows["words alone"].get(name)
            mark += "+" if key != "words alone" and words is not None and row[name] > words + 1e-9 else ""
            cells.append(f"{row[name]:.3f}{mark}")
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    return lines


def report(
    lme: dict[str, dict[str, float]],
    locomo: dict[str, dict[str, float]],
    corpus: dict[str, dict[str, float]],
    counts: tuple[int, int],
) -> str:
    lme_names = list(bench_longmemeval.MEASURES)
    locomo_names = [f"{measure} ({which})" for which in bench_locomo.KEYS for measure in ("hit@5", "hit@10")]
    lines = [
        "# Changes of the fused formula, measured (none shipped)",
        "",
        f"Written by `python scripts/fusion_options.py --kept DIR` on {datetime.now(UTC):%Y-%m-%d}, at the",
        f"model's floor {FLOOR}, limit {LIMIT}. Each row is one formula (the script's docstring says",
        "what each changes); `today` is the ranker's. `*`: under today's; `+`: above words alone.",
        "The server's ranking is not changed by this script.",
        "",
        f"## LongMemEval, {counts[0]} questions (measures as in longmemeval.md)",
        "",
        *table(lme, lme_names),
        "",
        f"## LoCoMo, {counts[1]} questions (categories 1-4; the original key and the corrected one)",
        "",
        *table(locomo, locomo_names),
        "",
        "## The recall gate's corpus (tests/recall/)",
        "",
        *table(corpus, list(corpus["today"])),
        "",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    data_arguments(parser)
    parser.add_argument("--report", type=Path, default=REPORT)
    args = parser.parse_args(argv)
    searched = both_searches(args, "fusion_options")
    if searched is None:
        return 1
    lme_searches, locomo_searched = searched
    corpus = corpus_rows()
    text = report(
        rows_of(lme_searches), rows_of(locomo_searched), corpus, (len(lme_searches), len(locomo_searched))
    )
    args.report.write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
