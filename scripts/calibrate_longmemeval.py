"""The floor and span on LongMemEval: a grid of (floor, span) over vaults the benchmark kept.

`python scripts/bench_longmemeval.py --keep DIR` leaves each question's vault, the
plugin's vector file and the memory-to-turn map in DIR. This script opens each of those
vaults in this process with the embeddings plugin (its vectors read from the file, so
nothing is embedded again), then searches the question through
`squirrel_mcp.server.searching.run_search` (the code behind search_memory) words only,
and hybrid for every (floor, span) of the grid, scoring as the benchmark does. The
plugin's floor and span are changed in this process only. Writes the table to --report.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import bench_longmemeval
from bench_stdio import PASSPHRASE
from calibrate_floor import numbers, warm

from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.storage.local import LocalVault

FLOORS = (0.30, 0.32, 0.35, 0.40)
SPANS = (0.02, 0.03, 0.05, 0.15, 0.35)


def kept_rows(kept: Path, question: bench_longmemeval.Question, grid: Sequence[tuple[float, float]]) -> Any:
    """One kept question's measures: words only, then hybrid per (floor, span); None if not kept."""
    vault_path = kept / f"{question.question_id}.sqlite3"
    held_path = kept / f"{question.question_id}.held.json"
    if not held_path.is_file():
        return None
    held = {memory_id: frozenset(keys) for memory_id, keys in json.loads(held_path.read_text()).items()}
    storage = LocalVault(vault_path, create=False)
    try:
        store = MemoryStore.unlock(storage, PASSPHRASE)
        # The memories were saved today, through the server: their age is counted from now.
        with warm(store, kept / f"{question.question_id}.cache", datetime.now(UTC)) as vault:

            def measured(words_only: bool) -> dict[str, float]:
                found = vault.search(question.text, words_only=words_only).results
                return bench_longmemeval.scores([held.get(hit.id, frozenset()) for hit in found], question)

            rows: dict[Any, Any] = {"type": question.question_type, "words only": measured(True)}
            for floor, span in grid:
                vault.plugin.hybrid.floor, vault.plugin.hybrid.span = floor, span
                rows[(floor, span)] = measured(False)
        store.close()
    finally:
        storage.close()
    return rows


def render(rows: Sequence[dict[Any, dict[str, float]]], grid: Sequence[tuple[float, float]]) -> str:
    """The grid's table: words only first, then each (floor, span)."""
    measures = bench_longmemeval.MEASURES
    lines = [
        "# The floor and span on LongMemEval",
        "",
        "Written by scripts/calibrate_longmemeval.py (`python scripts/calibrate_longmemeval.py DIR`",
        "over the vaults `python scripts/bench_longmemeval.py --keep DIR` kept): each question's vault",
        "searched in one process through `run_search` (the code behind search_memory) with the real",
        "plugin and model and the vectors the benchmark's server computed, words only and hybrid at",
        "each (floor, span) of the grid, limit 10, scored as docs/benchmarks/longmemeval.md says.",
        f"{len(rows)} questions: "
        + ", ".join(f"{kind} {count}" for kind, count in sorted(Counter(row["type"] for row in rows).items()))
        + ".",
        "",
        "| ranking | " + " | ".join(measures) + " |",
        "|---|" + "---:|" * len(measures),
    ]
    for key in ["words only", *grid]:
        name = key if isinstance(key, str) else f"hybrid, floor {key[0]:.2f}, span {key[1]:.2f}"
        figures = bench_longmemeval.mean_scores([row[key] for row in rows])
        lines.append(f"| {name} | " + " | ".join(f"{figures[m]:.3f}" for m in measures) + " |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Measure the grid over every kept question; print and write the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kept", type=Path, help="the directory bench_longmemeval.py --keep wrote")
    parser.add_argument(
        "--data", type=Path, default=bench_longmemeval.DATA, help="LongMemEval's question files"
    )
    parser.add_argument("--floors", type=numbers, default=FLOORS, help="floors, separated by commas")
    parser.add_argument("--spans", type=numbers, default=SPANS, help="spans, separated by commas")
    parser.add_argument("--report", type=Path, required=True, help="where to write the table")
    args = parser.parse_args(argv)
    grid = [(floor, span) for floor in args.floors for span in args.spans]
    rows = []
    for path in bench_longmemeval.question_files(args.data):
        if (args.kept / f"{path.stem}.held.json").is_file():
            found = kept_rows(args.kept, bench_longmemeval.load(path), grid)
            if found is not None:
                rows.append(found)
                print(f"{path.stem}: measured", flush=True)
    text = render(rows, grid)
    args.report.write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
