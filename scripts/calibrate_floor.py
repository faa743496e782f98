"""Choosing the model's floor and span, and the prefix length, from data: every candidate side by side.

The floor is the cosine at or below which a memory is not found by meaning; the span
is how far above the floor the meaning part reaches its full weight (docs/hybrid.md).
Both live in the model's manifest. This script measures, for a grid of (floor, span),
through `squirrel_mcp.server.searching.run_search` (the code behind search_memory)
with the real plugin and model, after every memory is embedded:

- LoCoMo (conversations read at run time from a directory outside the repository,
  as scripts/bench_locomo.py does): hybrid hit@5, hit@10 and MRR over categories 1-4;
- the recall gate's corpus (tests/recall/): paraphrase and exact-word recall@5;
- the unanswerable questions (tests/recall/unanswerable.json, which nothing in that
  corpus answers): how many return any hit, and how many a hit found by meaning
  alone (lexicalScore 0).

Then, words only, the prefix length (a query word this long or longer also matches as
a prefix): 3 and 4 side by side on the same sets. Writes docs/benchmarks/floor.md.
The search code is the installed one; the grid only changes the running plugin's
floor and span, and the prefix rows the tokenizer's PREFIX_LENGTH, in this process.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import bench_longmemeval
from bench_locomo import DATA, Conversation, conversation_files, load, mean_scores, question_scores
from bench_stdio import Item

ROOT = Path(__file__).resolve().parent.parent
# The recall corpus's loader lives with the tests; run from anywhere, it is found from the root.
sys.path.insert(0, str(ROOT))

from squirrel_mcp.book.memories import MemoryStore  # noqa: E402
from squirrel_mcp.core.config import Config  # noqa: E402
from squirrel_mcp.core.models import Revision  # noqa: E402
from squirrel_mcp.plugins.manager import PluginHost, get_plugin_manager, load_plugins  # noqa: E402
from squirrel_mcp.server.results import SearchResult  # noqa: E402
from squirrel_mcp.server.searching import run_search  # noqa: E402
from squirrel_mcp.storage.local import LocalVault  # noqa: E402
from squirrel_mcp.text import tokens  # noqa: E402
from tests.recall.corpus import CORPUS, NOW, SETS, UNANSWERABLE, measure, revision  # noqa: E402

REPORT = ROOT / "docs" / "benchmarks" / "floor.md"
FLOORS = (0.20, 0.25, 0.30, 0.32, 0.35, 0.40, 0.45)
SPANS = (0.02, 0.03, 0.05, 0.15, 0.35)
PREFIX_LENGTHS = (3, 4)
LIMIT = 10


@dataclass
class Vault:
    """One store with a lexical host and a hybrid host over it, the plugin warm."""

    store: MemoryStore
    lexical: PluginHost
    hybrid: PluginHost
    plugin: Any
    now: datetime = NOW

    def search(self, query: str, *, words_only: bool = False) -> SearchResult:
        host = self.lexical if words_only else self.hybrid
        return run_search(self.store, host, query, limit=LIMIT, now=self.now)


@contextmanager
def vault_of(memories: list[Revision]) -> Iterator[Vault]:
    """A throwaway vault holding `memories`, with the embeddings plugin started and warm."""
    with tempfile.TemporaryDirectory(prefix="squirrel-floor-") as scratch:
        storage = LocalVault(Path(scratch) / "vault.sqlite3", create=True)
        try:
            store = MemoryStore.create(storage, secrets.token_urlsafe(16))
            store.import_histories([[memory] for memory in memories])
            # The plugin keeps its vectors in this scratch directory, not in this user's cache.
            with warm(store, Path(scratch) / "cache") as vault:
                yield vault
        finally:
            storage.close()


@contextmanager
def warm(store: MemoryStore, cache: Path, now: datetime = NOW) -> Iterator[Vault]:
    """The embeddings plugin started over `store`, its vector file in `cache`, every memory embedded."""
    pm = get_plugin_manager()
    load_plugins(pm, env={"SQUIRREL_MCP_PLUGINS": "embeddings"})
    hybrid = PluginHost(pm)
    os.environ["SQUIRREL_MEMORY_CACHE_DIR"] = str(cache)
    hybrid.start(Config.from_env(), store)
    plugin = pm.get_plugin("embeddings")
    if not hybrid.wait_started(300) or plugin is None or plugin.hybrid is None:
        raise SystemExit("calibrate_floor: the embeddings plugin did not start")
    plugin.hybrid.warm_all()
    try:
        yield Vault(store, PluginHost(get_plugin_manager()), hybrid, plugin, now)
    finally:
        hybrid.shutdown()


def conversation_memories(conversation: Conversation) -> tuple[list[Revision], dict[str, str]]:
    """Each turn as a memory (entity the speaker), and memory id -> dia_id."""
    items = [Item(turn.dia_id, turn.speaker, turn.text) for turn in conversation.turns]
    memories, held = item_memories(items, merge=False)
    return memories, {memory_id: min(keys) for memory_id, keys in held.items()}


def item_memories(
    items: Sequence[Item], *, merge: bool = True
) -> tuple[list[Revision], dict[str, frozenset[str]]]:
    """Each item as a memory, and memory id -> the keys it holds.

    The memories are dated 10 ms apart, the last at NOW, as the benchmarks' saves
    through the server are: a recency weight that differs in the sixth decimal still
    orders two memories whose other numbers are equal, so the same date for all would
    measure an order no real vault has. With `merge`, as save_memory does, items of the
    same text and entity are one memory, dated by the first.
    """
    first: dict[tuple[str, str] | int, int] = {}
    for n, item in enumerate(items):
        first.setdefault((item.entity, item.text) if merge else n, n)
    count = len(items)

    def stamp(n: int) -> str:
        when = NOW - timedelta(milliseconds=10 * (count - n))
        return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")

    memories = [
        Revision.model_validate(
            {
                "id": f"{n + 1:016x}",
                "entity": items[n].entity,
                "text": items[n].text,
                "category": "note",
                "createdAt": stamp(n + 1),
                "updatedAt": stamp(n + 1),
                "revision": 1,
                "change": "created",
            }
        )
        for n in first.values()
    ]
    held: dict[str, set[str]] = {}
    for n, item in enumerate(items):
        held.setdefault(f"{first[(item.entity, item.text) if merge else n] + 1:016x}", set()).add(item.key)
    return memories, {memory_id: frozenset(keys) for memory_id, keys in held.items()}


def locomo_figures(
    vault: Vault, conversation: Conversation, dia: dict[str, str], words_only: bool
) -> list[dict[str, float]]:
    rows = []
    for question in conversation.questions:
        result = vault.search(question.text, words_only=words_only)
        ranked = [frozenset({dia[hit.id]}) for hit in result.results]
        rows.append(question_scores(ranked, question.evidence))
    return rows


def corpus_figures(vault: Vault, words_only: bool) -> dict[str, float]:
    """Paraphrase and exact recall@5, and the unanswerable counts (any hit; a hit by meaning alone)."""
    figures = {}
    for name in ("paraphrase", "exact", "ranking", "scripts"):
        queries = SETS[name]
        ranked = [
            [hit.id for hit in vault.search(q["query"], words_only=words_only).results] for q in queries
        ]
        figures[name] = measure(queries, ranked)["recall@5"]
    answers = [vault.search(q["query"], words_only=words_only) for q in UNANSWERABLE]
    figures["any hit"] = sum(1 for answer in answers if answer.results)
    figures["by meaning alone"] = sum(
        1 for answer in answers if any(hit.lexicalScore == 0 for hit in answer.results)
    )
    return figures


# (floor, span) pairs, in the order the report lists them.
Grid = list[tuple[float, float]]


def at_the_models_floor(conversation: Conversation) -> dict[str, list[dict[str, float]]]:
    """Per-question scores, words only and hybrid, with the model's own floor and span."""
    memories, dia = conversation_memories(conversation)
    with vault_of(memories) as vault:
        return {
            "words only": locomo_figures(vault, conversation, dia, True),
            "hybrid": locomo_figures(vault, conversation, dia, False),
        }


def longmemeval_rows(
    question: bench_longmemeval.Question, grid: Sequence[tuple[float, float]] = ()
) -> dict[Any, dict[str, float]]:
    """One LongMemEval question's measures: words only, hybrid (the model's floor and span), the grid."""
    memories, held = item_memories(question.turns)

    def measured(vault: Vault, words_only: bool) -> dict[str, float]:
        result = vault.search(question.text, words_only=words_only)
        return bench_longmemeval.scores([held[hit.id] for hit in result.results], question)

    with vault_of(memories) as vault:
        rows: dict[Any, dict[str, float]] = {
            "words only": measured(vault, True),
            "hybrid": measured(vault, False),
        }
        for floor, span in grid:
            vault.plugin.hybrid.floor, vault.plugin.hybrid.span = floor, span
            rows[(floor, span)] = measured(vault, False)
    return rows


def numbers(text: str) -> tuple[float, ...]:
    return tuple(float(part) for part in text.split(","))


def conversation_rows(conversation: Conversation, grid: Grid) -> dict[Any, list[dict[str, float]]]:
    """Per-question scores of one conversation: hybrid per (floor, span), words only per prefix length.

    One vault at a time: the plugin keeps one account's state per process.
    """
    memories, dia = conversation_memories(conversation)
    rows: dict[Any, list[dict[str, float]]] = {}
    with vault_of(memories) as vault:
        for floor, span in grid:
            vault.plugin.hybrid.floor, vault.plugin.hybrid.span = floor, span
            rows[(floor, span)] = locomo_figures(vault, conversation, dia, False)
        for length in PREFIX_LENGTHS:
            with prefix_length(length):
                rows[length] = locomo_figures(vault, conversation, dia, True)
    print(f"{conversation.name}: measured", flush=True)
    return rows


def corpus_rows(grid: Grid) -> dict[Any, dict[str, float]]:
    """The recall corpus's figures: hybrid for each (floor, span), and words only per prefix length."""
    rows: dict[Any, dict[str, float]] = {}
    with vault_of([revision(memory) for memory in CORPUS]) as vault:
        for floor, span in grid:
            vault.plugin.hybrid.floor, vault.plugin.hybrid.span = floor, span
            rows[(floor, span)] = corpus_figures(vault, False)
        for length in PREFIX_LENGTHS:
            with prefix_length(length):
                rows[length] = corpus_figures(vault, True)
    print("recall corpus: measured", flush=True)
    return rows


@contextmanager
def prefix_length(length: int) -> Iterator[None]:
    """The tokenizer's PREFIX_LENGTH set to `length` for a while, in this process."""
    kept = tokens.PREFIX_LENGTH
    tokens.PREFIX_LENGTH = length
    try:
        yield
    finally:
        tokens.PREFIX_LENGTH = kept


def render(
    corpus: dict[Any, dict[str, float]],
    locomo: list[dict[Any, list[dict[str, float]]]],
    names: Sequence[str],
    build: str,
    grid: Grid,
) -> str:
    def joined(key: Any) -> dict[str, float]:
        return {**mean_scores([row for rows in locomo for row in rows[key]]), **corpus[key]}

    grid_rows = [{"floor": floor, "span": span, **joined((floor, span))} for floor, span in grid]
    prefixes = [{"length": length, **joined(length)} for length in PREFIX_LENGTHS]
    questions = len(UNANSWERABLE)
    lines = [
        "# Choosing the floor, the span and the prefix length",
        "",
        "Written by scripts/calibrate_floor.py (`python scripts/calibrate_floor.py [LOCOMO_DIR]`), through",
        "`run_search` (the code behind search_memory) with the real plugin and model, every memory",
        f"embedded first. LoCoMo: conversations {', '.join(names)}, categories 1-4, limit 10 (the data is",
        "read at run time from outside the repository). Recall corpus: tests/recall/ (paraphrase and",
        f"exact recall@5). Unanswerable: the {questions} questions of tests/recall/unanswerable.json,",
        "which nothing in the recall corpus answers: how many return any hit, and how many a hit found",
        "by meaning alone (lexicalScore 0).",
        "",
        f"Build measured: {build}.",
        "",
        "## Floor and span (hybrid)",
        "",
        "| floor | span | LoCoMo hit@5 | hit@10 | MRR | paraphrase recall@5 | exact recall@5 "
        "| unanswerable: any hit | by meaning alone |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in grid_rows:
        lines.append(
            f"| {row['floor']:.2f} | {row['span']:.2f} | {row['hit@5']:.3f} | {row['hit@10']:.3f} | "
            f"{row['MRR']:.3f} | {row['paraphrase']:.3f} | {row['exact']:.3f} | "
            f"{row['any hit']} of {questions} | {row['by meaning alone']} of {questions} |"
        )
    lines += [
        "",
        "## Prefix length (words only)",
        "",
        "| a prefix from | LoCoMo hit@5 | hit@10 | MRR | exact recall@5 | ranking recall@5 "
        "| scripts recall@5 | unanswerable: any hit |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in prefixes:
        lines.append(
            f"| {row['length']} characters | {row['hit@5']:.3f} | {row['hit@10']:.3f} | {row['MRR']:.3f} | "
            f"{row['exact']:.3f} | {row['ranking']:.3f} | {row['scripts']:.3f} | "
            f"{row['any hit']} of {questions} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", nargs="?", type=Path, default=DATA, help="the directory of LoCoMo's files")
    parser.add_argument("--floors", type=numbers, default=FLOORS, help="floors, separated by commas")
    parser.add_argument("--spans", type=numbers, default=SPANS, help="spans, separated by commas")
    parser.add_argument("--report", type=Path, default=REPORT, help="where to write the report")
    parser.add_argument("--build", default="this checkout", help="which build this is, for the report")
    args = parser.parse_args(argv)
    grid = [(floor, span) for floor in args.floors for span in args.spans]
    files = conversation_files(args.data)
    if not files:
        print(f"calibrate_floor: no LoCoMo conversations in {args.data}; nothing measured", flush=True)
        return 1
    conversations = [load(path) for path in files]
    corpus = corpus_rows(grid)
    locomo = [conversation_rows(conversation, grid) for conversation in conversations]
    text = render(corpus, locomo, [c.name for c in conversations], args.build, grid)
    args.report.write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
