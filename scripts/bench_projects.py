"""Speed of a search scoped to a project, beside the same search over every project, in one run.

A vault of 100,000 memories in 10 projects, plus some with no project, in a real store
(`MemoryStore`, cheap key derivation), searched through
`squirrel_mcp.server.searching.run_search`, what `search_memory` runs minus the MCP round
trip. Each query is searched three ways, in turn: scoped as the tools search by default
(`projects={P, None}`: the session's project and the memories with none, P turning through
the 10 projects query by query); unscoped (`projects=None`, as `project: "*"` and every
search before projects); and scoped the way it was first done, each word match's memory
asked for its project (`RankOptions.accepts` as `bm25.search`'s `keep`) rather than kept by
the index's sets of each project's documents. The order of the three turns query by query,
so load from other processes falls on all alike. Median and p95 (nearest rank) of each, and
the ratios to unscoped.

- Word search: the seeded synthetic corpus and query mix of scripts/bench_search.py (Zipf
  words; queries of 1 to 4 words, half of them taken from a memory the scoped search may
  return, half drawn from the vocabulary), no ranker installed.
- Hybrid search: the embeddings plugin loaded as the server loads it, with the shipped
  model; the memories are the recall corpus repeated to size as in scripts/bench_hybrid.py,
  each repeat's vector the original's plus a little noise, written to the plugin's vector
  file before it starts, so it starts warm and embeds only the queries. Queries: the recall
  set's, and as many made here of 1 to 4 words of a memory the scoped search may return.

Every scoped answer is checked to hold only memories of P or of none and to equal the answer
scoped memory by memory; the first word answers are also checked to be the unscoped ranking of
every match with the other projects' memories left out (ids, scores, total).

The report is written to docs/benchmarks/projects.md (`nox -s bench`).
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

from bench_search import NOW, Corpus, nearest_rank

from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.core.config import Config
from squirrel_mcp.core.models import Revision
from squirrel_mcp.keys import crypto
from squirrel_mcp.plugins.manager import PluginHost, get_plugin_manager, load_plugins
from squirrel_mcp.search import bm25
from squirrel_mcp.search.index import SearchIndex
from squirrel_mcp.search.ranking import RankOptions
from squirrel_mcp.server import searching
from squirrel_mcp.server.results import SearchResult
from squirrel_mcp.storage.local import LocalVault

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = REPO / "docs" / "benchmarks" / "projects.md"
SEED = 20261206
LIMIT = 10
# The target: a scoped search's median and p95 at most this times the unscoped one's.
TARGET = 1.05
# How many word queries are also checked against the unscoped ranking of every match.
CHECKED = 30
SIDES = ("scoped", "unscoped", "scoped, memory by memory")
# What scripts/bench_hybrid.py adds to the text of each repeat of a recall-corpus memory.
COPY = re.compile(r" \(copy \d+\)$")

Projects = frozenset[str | None] | None


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--projects", type=int, default=10, help="projects the memories are spread over")
    parser.add_argument("--none-share", type=float, default=0.1, help="share of memories with no project")
    parser.add_argument("--queries", type=int, default=300, help="timed word queries")
    parser.add_argument("--hybrid-queries", type=int, default=160, help="timed queries made up for hybrid")
    parser.add_argument("--no-hybrid", action="store_true", help="word search only (no model needed)")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    return parser.parse_args(argv)


def project_names(count: int) -> list[str]:
    """`count` project names shaped like repository identities."""
    return [f"github.com/example-{n}/service-{n}" for n in range(count)]


def place(memories: list[Revision], names: list[str], none_share: float, seed: int) -> list[Revision]:
    """Each memory put in one of `names`, or in none with chance `none_share` (seeded)."""
    rng = random.Random(seed)
    placed = []
    for memory in memories:
        project = None if rng.random() < none_share else rng.choice(names)
        placed.append(memory.model_copy(update={"project": project}))
    return placed


@dataclass
class Side:
    """The timings of one side (scoped or unscoped), in milliseconds."""

    times: list[float]

    @property
    def median(self) -> float:
        """The median time."""
        return statistics.median(self.times)

    @property
    def p95(self) -> float:
        """The nearest-rank 95th percentile."""
        return nearest_rank(self.times, 0.95)


@dataclass
class Outcome:
    """One part's figures: each side's times, and how many memories matched (median)."""

    name: str
    queries: int
    sides: dict[str, Side]
    matches: dict[str, float]


@contextmanager
def store_of(memories: list[Revision], folder: Path) -> Iterator[MemoryStore]:
    """A real store in `folder` holding `memories` (one revision each), imported as an export is."""
    cheap = crypto.KdfParams(salt=b"s" * crypto.SALT_BYTES, n=2**14)
    storage = LocalVault(folder / "vault.sqlite3", create=True)
    store = MemoryStore.create(storage, "bench", kdf=cheap)
    started = time.perf_counter()
    store.import_histories([[memory] for memory in memories])
    print(f"imported {len(memories):,} memories in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    try:
        yield store
    finally:
        store.close()
        storage.close()


def one_by_one(
    index: SearchIndex,
    query: str,
    now: datetime,
    *,
    limit: int | None = None,
    keep: Callable[[Revision], bool] | None = None,
    projects: Projects = None,
) -> bm25.Outcome:
    """`bm25.search` as run_search first called it for projects: each match's memory asked its project."""
    if projects is not None:
        options = RankOptions(limit or 0, False, None, (), now, projects=frozenset(projects))
        assert keep is None, "the benchmark filters by project alone"
        keep = options.accepts
    return bm25.search(index, query, now, limit=limit, keep=keep)


def searcher(store: MemoryStore, host: PluginHost) -> Callable[[str, str, str], SearchResult]:
    """A search of `text` through run_search, one of SIDES, P being `project`."""

    def search(side: str, text: str, project: str) -> SearchResult:
        projects = None if side == "unscoped" else frozenset({project, None})
        if side != "scoped, memory by memory":
            return searching.run_search(store, host, text, limit=LIMIT, now=NOW, projects=projects)
        searching.bm25 = SimpleNamespace(search=one_by_one)  # type: ignore[assignment]
        try:
            return searching.run_search(store, host, text, limit=LIMIT, now=NOW, projects=projects)
        finally:
            searching.bm25 = bm25

    return search


def compare(
    name: str,
    search: Callable[[str, str, str], SearchResult],
    queries: list[tuple[str, str]],
    check: Callable[[str, str, dict[str, SearchResult]], None],
) -> Outcome:
    """Time each (query, project) every side's way, the order turning query by query."""
    for text, project in queries[:10]:
        for side in SIDES:
            search(side, text, project)
    times: dict[str, list[float]] = {side: [] for side in SIDES}
    totals: dict[str, list[int]] = {side: [] for side in SIDES}
    for turn, (text, project) in enumerate(queries):
        answers = {}
        for side in SIDES[turn % 3 :] + SIDES[: turn % 3]:
            started = time.perf_counter()
            answers[side] = search(side, text, project)
            times[side].append((time.perf_counter() - started) * 1000)
            totals[side].append(answers[side].total)
        only_in(project, answers["scoped"])
        assert answers["scoped"] == answers["scoped, memory by memory"], "the two scoped searches differ"
        check(text, project, answers)
    sides = {side: Side(values) for side, values in times.items()}
    print(
        f"{name}: "
        + "; ".join(f"{side} median {s.median:.2f} ms, p95 {s.p95:.2f} ms" for side, s in sides.items()),
        file=sys.stderr,
    )
    return Outcome(name, len(queries), sides, {side: statistics.median(t) for side, t in totals.items()})


def only_in(project: str, answer: SearchResult) -> None:
    """Fail unless every hit of a scoped answer is in `project` or in none."""
    assert all(hit.project in (project, None) for hit in answer.results), "a scoped search left its projects"


def word_part(args: argparse.Namespace, names: list[str], folder: Path) -> Outcome:
    """The word search at size, scoped and unscoped."""
    corpus = Corpus(args.seed)
    memories = place([corpus.memory(n) for n in range(args.memories)], names, args.none_share, args.seed)
    by_project: dict[str | None, list[Revision]] = {}
    for memory in memories:
        by_project.setdefault(memory.project, []).append(memory)
    queries = []
    for n in range(args.queries):
        project = names[n % len(names)]
        queries.append((corpus.query(by_project[project] + by_project.get(None, [])), project))
    host = PluginHost(get_plugin_manager())
    checked: list[int] = []
    with store_of(memories, folder / "words") as store:

        def check(text: str, project: str, answers: dict[str, SearchResult]) -> None:
            if len(checked) < CHECKED:
                checked.append(1)
                every = searching.run_search(store, host, text, limit=args.memories, now=NOW)
                kept = [(h.id, h.score) for h in every.results if h.project in (project, None)]
                found = answers["scoped"]
                assert [(h.id, h.score) for h in found.results] == kept[:LIMIT], "scoped ranking differs"
                assert found.total == len(kept), "scoped total differs"

        return compare("word search", searcher(store, host), queries, check)


def hybrid_part(args: argparse.Namespace, names: list[str], folder: Path) -> Outcome:
    """Hybrid search at size, scoped and unscoped, through the embeddings plugin."""
    import json

    import bench_hybrid
    import numpy as np

    from squirrel_mcp_embeddings import embedder, hooks, vectors, warmup

    memories = place(bench_hybrid.corpus_memories(args.memories), names, args.none_share, args.seed + 1)
    model = embedder.load(threads=hooks.RUNTIME_THREADS)
    base_count = min(len(memories), 500)
    texts = [warmup.recipe(memory) for memory in memories[:base_count]]
    base = np.concatenate([model.embed(texts[i : i + 32]) for i in range(0, len(texts), 32)])
    rng = np.random.default_rng(args.seed)
    rows = np.resize(base, (len(memories), base.shape[1])).astype(np.float32)
    rows[base_count:] += rng.normal(0, 0.013, rows[base_count:].shape).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    manifest = model.manifest
    stamp = vectors.Stamp(manifest.model, hooks.manifest_sha256(), warmup.RECIPE_VERSION, manifest.dimensions)
    del model
    recall = json.loads((bench_hybrid.RECALL / "queries.json").read_text(encoding="utf-8"))
    words = random.Random(args.seed + 2)
    queries: list[tuple[str, str]] = []
    in_scope = {name: [m for m in memories if m.project in (name, None)] for name in names}
    for n in range(len(recall) + args.hybrid_queries):
        project = names[n % len(names)]
        if n < len(recall):
            queries.append((recall[n]["query"], project))
            continue
        # The memory's own words, not the "(copy n)" its repeats carry: every repeat holds that.
        said = COPY.sub("", words.choice(in_scope[project]).text).lower().split()
        queries.append((" ".join(words.sample(said, min(words.randint(1, 4), len(said)))), project))
    words.shuffle(queries)
    cache = folder / "cache"
    os.environ[vectors.CACHE_DIR_VARIABLE] = str(cache)
    with store_of(memories, folder / "hybrid") as store:
        table = vectors.VectorTable(stamp.dimensions)
        table.put_many(((m.id, m.revision) for m in memories), rows)
        key = store.derive_key(vectors.KEY_PURPOSE)
        vectors.save(vectors.vector_path(store.account_id), table, key, store.account_id, stamp)
        del table, rows
        pm = get_plugin_manager()
        load_plugins(pm, env={"SQUIRREL_MCP_PLUGINS": "embeddings"})
        host = PluginHost(pm)
        host.start(Config(folder / "hybrid" / "vault.sqlite3", None, None, None, cache), store)
        try:
            plugin = pm.get_plugin("embeddings")
            if not host.wait_started(300) or plugin is None or plugin.hybrid is None:
                raise SystemExit("bench_projects: the embeddings plugin did not start")
            # Warm from its file: nothing to embed but the queries.
            assert not plugin.hybrid.pending, "the vector file was not read"

            def check(text: str, project: str, answers: dict[str, SearchResult]) -> None:
                assert all(a.ranking == "hybrid" for a in answers.values()), "not ranked by the plugin"

            return compare("hybrid search", searcher(store, host), queries, check)
        finally:
            host.shutdown()


def report(args: argparse.Namespace, outcomes: list[Outcome], loads: list[float]) -> str:
    """The Markdown page."""
    none_share = f"{args.none_share:.0%}"
    lines = [
        "# Search scoped to a project",
        "",
        "Written by `scripts/bench_projects.py` (`nox -s bench`). One search through",
        "`squirrel_mcp.server.searching.run_search` (what `search_memory` runs, minus the MCP round",
        f"trip) on a real store of {args.memories:,} memories in {args.projects} projects, {none_share} of",
        "them in none, the same queries every way in the same run:",
        "",
        "- *scoped*: the tools' default, the session's project and the memories with none",
        "  (`projects={P, None}`); the index keeps each project's documents as a set, and the word",
        "  search keeps the projects' matches by set intersection after scoring;",
        '- *unscoped*: every project (`projects=None`, as `project: "*"`, and every search before',
        "  projects);",
        "- *scoped, memory by memory*: the same scope as first written, each word match's memory",
        "  asked for its project (`RankOptions.accepts` as the word search's filter) before scoring.",
        "",
        "| Search | Queries | Way | Median (ms) | p95 (ms) | Median / unscoped | p95 / unscoped "
        "| Median matches |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for o in outcomes:
        plain = o.sides["unscoped"]
        for side, times in o.sides.items():
            lines.append(
                f"| {o.name} | {o.queries} | {side} | {times.median:.2f} | {times.p95:.2f} "
                f"| {times.median / plain.median:.2f} | {times.p95 / plain.p95:.2f} "
                f"| {o.matches[side]:,.0f} |"
            )
    verdicts = [f"{o.name} {'within' if within(o) else 'NOT within'} it" for o in outcomes]
    lines += [
        "",
        f"Target: scoped at most {TARGET:.2f} times unscoped, median and p95; in this run "
        + ", ".join(verdicts)
        + ".",
        "",
        "Why the first way of scoping cost more in word search: every word match's memory was",
        "asked for its project in Python before scoring, and each query term's posting was then",
        "cut to those memories. Now the matches are scored as in an unscoped search, then the",
        "projects' are kept by intersecting with the index's sets of their documents, and the",
        "fewer matches left make the rest (recency, the top 10, lexicalScore) cheaper. With the",
        "hybrid ranker every match is handed on, so the word search's share is smaller; there",
        "the fewer matches make the ranker's work smaller too, whichever way they were filtered.",
        "",
        "## How it was measured",
        "",
        "- Memories: imported into a real store (`MemoryStore.import_histories`) with seeded projects",
        f"  named like repositories; each in one of {args.projects}, or in none with chance {none_share}.",
        "  Each query's P turns through the projects, query by query.",
        "- Word search: the synthetic corpus of `scripts/bench_search.py` (20,000-word Zipf vocabulary,",
        "  8 to 60 words a memory, an entity, tags and keywords); no ranker installed, so the word",
        f"  search ranks and keeps the top {LIMIT}. Queries: 1 to 4 words, half taken from a memory",
        "  the scoped search may return, half drawn from the vocabulary.",
        "- Hybrid search: the embeddings plugin loaded as the server loads it, the shipped model on the",
        "  CPU; the word search hands it every match and it embeds the query and fuses. Memories: the",
        "  recall corpus (tests/recall) repeated to size, each repeat's vector the original's plus",
        "  Gaussian noise (cosine about 0.95), in the plugin's vector file before it starts, so it",
        "  starts warm. Queries: the recall set's, and ones made here of 1 to 4 words of a memory",
        "  the scoped search may return, shuffled.",
        "- The first 10 queries run once untimed every way first; then each query is timed once",
        "  every way, the order of the three turning query by query. Median and p95 by nearest rank.",
        "  Median matches: the answers' `total`.",
        "- Checked while timing: every scoped answer holds only memories of P or of none and equals",
        f"  the answer scoped memory by memory; for the first {CHECKED} word queries, the scoped answer",
        "  (ids, scores, total) equals the unscoped ranking of every match with the other projects'",
        "  memories left out.",
        f"- Seed {args.seed}. Python {platform.python_version()} ({platform.python_implementation()}),",
        f"  {platform.platform()}, {platform.machine()}, {os.cpu_count()} CPUs, shared with other work",
        f"  while it ran (load average {loads[0]:.1f} at the start, {loads[1]:.1f} at the end): compare",
        "  the ways with each other, in one run, rather than with other pages' figures.",
        "",
    ]
    return "\n".join(lines)


def within(outcome: Outcome) -> bool:
    """Whether the scoped search met TARGET against the unscoped one, median and p95."""
    scoped, plain = outcome.sides["scoped"], outcome.sides["unscoped"]
    return scoped.median <= TARGET * plain.median and scoped.p95 <= TARGET * plain.p95


def main(argv: Sequence[str] | None = None) -> int:
    """Run the parts and write the report."""
    args = parse_args(argv)
    names = project_names(args.projects)
    outcomes = []
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="squirrel-bench-projects-") as scratch:
        outcomes.append(word_part(args, names, Path(scratch)))
        if not args.no_hybrid:
            outcomes.append(hybrid_part(args, names, Path(scratch)))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    loads.append(os.getloadavg()[0])
    args.output.write_text(report(args, outcomes, loads), encoding="utf-8")
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
