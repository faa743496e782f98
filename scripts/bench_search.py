"""Search latency of squirrel-mcp's lexical engine against SQLite FTS5, side by side.

What is measured: the wall-clock time of one search, in process, at 1k, 10k and
100k memories of realistic length, for

- squirrel-mcp: `bm25.search(index, query, now, limit=10)` on the in-memory
  `SearchIndex`, i.e. what `search_memory` does minus the MCP round trip: BM25F
  over entity, text, tags and keywords, with query words of three or more
  characters also matching as prefixes, the recency decay, `lexicalScore` for
  every hit, `total` and the top 10;
- SQLite FTS5 on the same corpus (an in-memory database, tokenizer `unicode61
  remove_diacritics 2`, the same field weights through `bm25()`), the query's
  words OR-ed, `ORDER BY bm25 LIMIT 10`: FTS5's cheapest equivalent, with no
  total, no decay and no share of words held;
- FTS5 with the total as well: the same query plus a `count(*)` of its matches,
  which is what squirrel-mcp returns;
- FTS5 with prefixes and the total: the same again, with each query word that
  squirrel-mcp matches as a prefix written as an FTS5 prefix query ("ras"*), so
  both engines find the same words (the table has no prefix index).

The corpus is synthetic and seeded: memory texts of 8 to 60 words (median about
25) drawn from a 20,000-word vocabulary with a Zipf distribution (s = 1.07), mixed
with English function words, an entity from 300, up to 3 tags and 4 keywords. The
queries (1 to 4 words) are drawn the same way, half of them from the words of a
random memory so that they hit. Every query runs once untimed on each engine,
then each is timed on every engine in turn, the engine order rotated per query so
that load from other processes falls on all alike. Median and p95 (nearest rank)
per engine and size; the report is written to docs/benchmarks.md (`nox -s bench`).

With `--crafted`, it measures instead the worst query the search tool takes, before
and after the bounds on a query's work (docs/search.md, "Limits"): 999 characters
of the 250 most common three-letter prefixes of a 3,000-memory vault's words, through
`squirrel_mcp.server.searching.run_search` on a real store, with a throwaway ranker plugin
installed that scores every candidate (so every match is scored, as with a ranker
by meaning). "Before" is `squirrel_mcp/search.py` as of the commit `--before` names,
loaded from git and put in place of the current one for its runs; the two alternate,
run by run. Ordinary queries are run both ways too, and must give identical hits.
The report is written to docs/benchmarks/search-limits.md.
"""

from __future__ import annotations

import argparse
import collections
import gc
import importlib.util
import math
import platform
import random
import re
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType

from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.core.config import Config
from squirrel_mcp.core.models import HALF_LIFE_DAYS, Revision
from squirrel_mcp.keys import crypto
from squirrel_mcp.plugins import hookspecs
from squirrel_mcp.plugins import manager as plugins
from squirrel_mcp.search import bm25
from squirrel_mcp.search.index import FIELD_WEIGHTS, SearchIndex
from squirrel_mcp.search.ranking import Candidate, RankedHit, Ranking, RankOptions
from squirrel_mcp.server import searching
from squirrel_mcp.server.results import SearchResult
from squirrel_mcp.storage.local import LocalVault
from squirrel_mcp.text.tokens import fold, matches_prefixes

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = REPO / "docs" / "benchmarks.md"
CRAFTED_OUTPUT = REPO / "docs" / "benchmarks" / "search-limits.md"
# The heading of the section scripts/bench_hybrid.py appends to DEFAULT_OUTPUT.
HYBRID_HEADING = "## Hybrid search (squirrel-mcp-embeddings)"
# The last commit before the bounds on a query's work.
BEFORE_BOUNDS = "c29831f"
NOW = datetime(2026, 6, 1, tzinfo=UTC)
_FUNCTION_WORDS = (
    "the a an and of to in on for with at by from is was are be has have had it its this that her his "
    "their she he they we i my our not but or as if when after before about into over"
)
FUNCTION_WORDS = _FUNCTION_WORDS.split()
_SYLLABLES = "ka lo mi ne ru sa te vi do ba ge hu ja ko li ma no pe qui ra so tu ve wa xi yo ze"
SYLLABLES = _SYLLABLES.split()


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--queries", type=int, default=300, help="timed queries per size")
    parser.add_argument("--seed", type=int, default=20261130)
    parser.add_argument("--output", type=Path, default=None, help="where the report goes")
    parser.add_argument("--crafted", action="store_true", help="time the crafted query before and after")
    parser.add_argument("--before", default=BEFORE_BOUNDS, help="the commit whose search.py is 'before'")
    parser.add_argument("--runs", type=int, default=7, help="timed runs of the crafted query per side")
    return parser.parse_args(argv)


class Corpus:
    """Seeded, Zipf-distributed words for memories and queries."""

    def __init__(self, seed: int, vocabulary: int = 20_000) -> None:
        """A vocabulary of distinct pseudo-words, ranked for Zipf sampling."""
        self.rng = random.Random(seed)
        words: list[str] = []
        seen: set[str] = set()
        while len(words) < vocabulary:
            word = "".join(self.rng.choice(SYLLABLES) for _ in range(self.rng.randint(2, 4)))
            if word not in seen:
                seen.add(word)
                words.append(word)
        self.words = words
        weights = [1 / rank**1.07 for rank in range(1, vocabulary + 1)]
        total = 0.0
        self.cumulative = []
        for weight in weights:
            total += weight
            self.cumulative.append(total)
        self.entities = ["user", *(f"{self.word()} {self.word()}".title() for _ in range(299))]

    def word(self) -> str:
        """One content word, Zipf-distributed."""
        return self.rng.choices(self.words, cum_weights=self.cumulative)[0]

    def sentence(self, length: int) -> str:
        """`length` words, about a third of them function words."""
        rng = self.rng
        words = (rng.choice(FUNCTION_WORDS) if rng.random() < 0.35 else self.word() for _ in range(length))
        return " ".join(words).capitalize()

    def memory(self, number: int) -> Revision:
        """One memory of realistic length, saved up to two years ago."""
        stamp = (NOW - timedelta(days=self.rng.uniform(0, 730))).isoformat().replace("+00:00", "Z")
        return Revision.model_validate(
            {
                "id": f"{number:016x}",
                "entity": self.rng.choice(self.entities),
                "text": self.sentence(min(60, max(8, round(self.rng.lognormvariate(math.log(25), 0.5))))),
                "tags": list(dict.fromkeys(self.word() for _ in range(self.rng.randint(0, 3)))),
                "keywords": list(dict.fromkeys(self.word() for _ in range(self.rng.randint(0, 4)))),
                "category": self.rng.choice(sorted(HALF_LIFE_DAYS)),
                "createdAt": stamp,
                "updatedAt": stamp,
                "revision": 1,
                "change": "created",
            }
        )

    def query(self, memories: list[Revision]) -> str:
        """1 to 4 words: half the time from one memory's text (a hit), else from the vocabulary."""
        count = self.rng.randint(1, 4)
        if self.rng.random() < 0.5:
            words = self.rng.choice(memories).text.lower().split()
            return " ".join(self.rng.sample(words, min(count, len(words))))
        return " ".join(self.word() for _ in range(count))


def fts5_database(memories: list[Revision]) -> sqlite3.Connection:
    """The corpus in an in-memory FTS5 table, folding accents like squirrel-mcp."""
    db = sqlite3.connect(":memory:")
    db.execute(
        "CREATE VIRTUAL TABLE m USING fts5("
        "entity, text, tags, keywords, tokenize='unicode61 remove_diacritics 2')"
    )
    db.executemany(
        "INSERT INTO m(rowid, entity, text, tags, keywords) VALUES (?, ?, ?, ?, ?)",
        (
            (number, m.entity, m.text, " ".join(m.tags), " ".join(m.keywords))
            for number, m in enumerate(memories)
        ),
    )
    db.commit()
    return db


def fts5_match(query: str) -> str:
    """The query's words OR-ed, each quoted so FTS5 reads none as syntax."""
    return " OR ".join('"' + word.replace('"', '""') + '"' for word in query.split())


def fts5_prefix_match(query: str) -> str:
    """The query's words OR-ed, those squirrel-mcp matches as prefixes written as FTS5 prefix queries."""
    return " OR ".join(
        '"' + word.replace('"', '""') + '"' + ("*" if matches_prefixes(fold(word)) else "")
        for word in query.split()
    )


WEIGHTS = ", ".join(str(FIELD_WEIGHTS[field]) for field in ("entity", "text", "tags", "keywords"))
TOP = f"SELECT rowid, bm25(m, {WEIGHTS}) AS rank FROM m WHERE m MATCH ? ORDER BY rank LIMIT 10"
COUNT = "SELECT count(*) FROM m WHERE m MATCH ?"


def nearest_rank(values: list[float], share: float) -> float:
    """The nearest-rank percentile of `values`."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def run_size(corpus: Corpus, size: int, queries: int) -> dict[str, object]:
    """Build both engines on `size` memories and time every query on each."""
    memories = [corpus.memory(number) for number in range(size)]
    gc.collect()
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    index = SearchIndex(memories)
    build_seconds = time.perf_counter() - started
    # Linux reports ru_maxrss in KiB: the growth of the peak is about what the index takes.
    index_bytes = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before) * 1024
    started = time.perf_counter()
    db = fts5_database(memories)
    fts5_build_seconds = time.perf_counter() - started
    texts = [corpus.query(memories) for _ in range(queries)]

    def ours(query: str) -> int:
        return bm25.search(index, query, NOW, limit=10).total

    def fts5_top(query: str) -> int:
        return len(db.execute(TOP, (fts5_match(query),)).fetchall())

    def fts5_total(query: str) -> int:
        match = fts5_match(query)
        db.execute(TOP, (match,)).fetchall()
        total: int = db.execute(COUNT, (match,)).fetchone()[0]
        return total

    def fts5_prefix_total(query: str) -> int:
        match = fts5_prefix_match(query)
        db.execute(TOP, (match,)).fetchall()
        total: int = db.execute(COUNT, (match,)).fetchone()[0]
        return total

    engines: dict[str, Callable[[str], int]] = {
        "squirrel-mcp": ours,
        "FTS5, top 10": fts5_top,
        "FTS5, top 10 + total": fts5_total,
        "FTS5 with prefixes, top 10 + total": fts5_prefix_total,
    }
    for query in texts:
        for run in engines.values():
            run(query)
    times: dict[str, list[float]] = {name: [] for name in engines}
    names = list(engines)
    hits = []
    for turn, query in enumerate(texts):
        order = names[turn % len(names) :] + names[: turn % len(names)]
        for name in order:
            started = time.perf_counter()
            found = engines[name](query)
            times[name].append((time.perf_counter() - started) * 1000)
            if name == "squirrel-mcp":
                hits.append(found)
    return {
        "size": size,
        "build": build_seconds,
        "fts5_build": fts5_build_seconds,
        "index_mb": index_bytes / 1e6,
        "median_hits": statistics.median(hits),
        "times": times,
    }


def report(results: list[dict[str, object]], args: argparse.Namespace) -> str:
    """The Markdown page."""
    lines = [
        "# Benchmarks",
        "",
        "## Search latency",
        "",
        "One search, in process, on the same synthetic corpus and queries for squirrel-mcp's",
        "lexical engine and for SQLite FTS5, measured in the same run. Generated by",
        "`scripts/bench_search.py` (`nox -s bench`, or `python scripts/bench_search.py`).",
        "",
        "| Memories | Engine | Median (ms) | p95 (ms) |",
        "|---:|---|---:|---:|",
    ]
    for result in results:
        times = result["times"]
        assert isinstance(times, dict)
        for name, values in times.items():
            lines.append(
                f"| {result['size']:,} | {name} | {statistics.median(values):.3f} | "
                f"{nearest_rank(values, 0.95):.3f} |"
            )
    lines += [
        "",
        "| Memories | Index build, squirrel-mcp (s) | Index size (MB, approx.) | FTS5 build (s) "
        "| Median hits per query |",
        "|---:|---:|---:|---:|---:|",
    ]
    for result in results:
        lines.append(
            f"| {result['size']:,} | {result['build']:.2f} | {result['index_mb']:.0f} | "
            f"{result['fts5_build']:.2f} | {result['median_hits']:,} |"
        )
    lines += [
        "",
        "## How it was measured",
        "",
        "- squirrel-mcp: `bm25.search(index, query, now, limit=10)` on the in-memory index, which",
        "  matches query words of three or more characters as prefixes too, scores every match",
        "  (BM25F times the recency decay), computes `lexicalScore` for each and `total`, and keeps",
        "  the top 10. The MCP round trip over stdio is not included.",
        "- FTS5: an in-memory table with `tokenize='unicode61 remove_diacritics 2'`, the query's",
        "  words OR-ed, `ORDER BY bm25(m, 2, 1, 2, 2) LIMIT 10` (the same field weights). The",
        "  first FTS5 row has no total, decay or share of words held; the second adds a",
        "  `count(*)` of the matches, as squirrel-mcp returns `total`. Both match exact terms",
        '  only. The third, "FTS5 with prefixes", is the second with each query word that',
        "  squirrel-mcp matches as a prefix (three or more characters, not a stopword) written",
        '  as an FTS5 prefix query (`"ras"*`, no prefix index), so both find the same words.',
        "- Corpus: seeded synthetic memories, 8 to 60 words of text (median about 25) drawn from a",
        "  20,000-word Zipf vocabulary (s = 1.07) mixed with English function words, an entity, up",
        "  to 3 tags and 4 keywords, saved up to two years back in random categories.",
        f"- Queries: {args.queries} per size, 1 to 4 words, half taken from one memory's text so",
        "  they hit. Each runs once untimed on every engine; then each is timed once per engine,",
        "  the engine order rotated per query. Median and p95 by nearest rank.",
        "- Index size is how much the process's peak resident memory grew while the index was",
        "  built (Linux `ru_maxrss`; the memories themselves were made before), so a rough figure.",
        f"- Seed {args.seed}.",
        "",
        "## Environment",
        "",
        f"- Python {platform.python_version()} ({platform.python_implementation()}), "
        f"SQLite {sqlite3.sqlite_version}",
        f"- {platform.platform()}, {platform.machine()}",
        "",
    ]
    return "\n".join(lines)


class ScoringRanker:
    """A throwaway ranker that scores every candidate, as a ranker by meaning does, then keeps the best."""

    @hookspecs.hookimpl
    def rank_memories(self, candidates: Sequence[Candidate], total: int, options: RankOptions) -> Ranking:
        """The candidates by lexicalScore, then the length of their text; cut to the limit."""
        scored = sorted(
            candidates, key=lambda c: (-(c.lexical_score + len(c.memory.text) / 1e6), c.memory.id)
        )
        best = scored[: options.limit]
        return Ranking(
            [RankedHit(c.memory.id, float(len(best) - n), c.lexical_score, 0.5) for n, c in enumerate(best)],
            total,
            "hybrid",
        )


# Where the modules the word search imported before the layout in subpackages live now.
MOVED = {
    "squirrel_mcp.index": "squirrel_mcp.search.index",
    "squirrel_mcp.models": "squirrel_mcp.core.models",
    "squirrel_mcp.ranking": "squirrel_mcp.search.ranking",
}


def search_as_of(commit: str) -> ModuleType:
    """The word search (`squirrel_mcp/search.py` then) as it was at `commit`, loaded as a module of its own.

    Its imports are pointed at where those modules are now; the code is that commit's.
    """
    source = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{commit}:base/squirrel_mcp/search.py"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for old, new in MOVED.items():
        source = re.sub(rf"\bfrom {re.escape(old)} import", f"from {new} import", source)
    spec = importlib.util.spec_from_loader("squirrel_mcp_search_before", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    # Dataclasses look their module up while the class is made.
    sys.modules[spec.name] = module
    exec(compile(source, f"search.py at {commit}", "exec"), module.__dict__)
    return module


def crafted_query(index: SearchIndex) -> str:
    """The 250 three-letter prefixes held by the most (memory, term) pairs, joined: 999 characters."""
    counts: collections.Counter[str] = collections.Counter()
    for term, posting in index.postings.items():
        if len(term) >= 3 and term.isalpha() and matches_prefixes(term[:3]):
            counts[term[:3]] += len(posting)
    return " ".join(prefix for prefix, _ in counts.most_common(250))


def run_crafted(args: argparse.Namespace) -> str:
    """Time the crafted query and ordinary ones before and after; the Markdown page."""
    corpus = Corpus(args.seed)
    before = search_as_of(args.before)
    after = searching.bm25
    with tempfile.TemporaryDirectory() as folder:
        cheap = crypto.KdfParams(salt=b"s" * crypto.SALT_BYTES, n=2**14)
        store = MemoryStore.create(LocalVault(Path(folder) / "vault", create=True), "passphrase", kdf=cheap)
        for number in range(3_000):
            memory = corpus.memory(number)
            store.save(
                entity=memory.entity,
                text=memory.text,
                category=memory.category,
                tags=memory.tags,
                keywords=memory.keywords,
            )
        memories = store.current()
        pm = plugins.get_plugin_manager()
        pm.register(ScoringRanker(), name="scoring")
        host = plugins.PluginHost(pm, log=lambda line: print(line, file=sys.stderr), rank_timeout=60)
        host.start(Config(Path(folder) / "vault", None, None, None, Path(folder) / "cache"), store)
        assert host.wait_started(10)
        assert host.has_rankers()
        query = crafted_query(store.index)
        planned = bm25.plan(store.index, query)
        outline = {
            "length": len(query),
            "words": len(query.split()),
            "terms": len(planned.matches),
            "expansions": planned.expansions,
            "unbounded": sum(len(store.index.expand(word)) for word in query.split()),
            "total": bm25.search(store.index, query, NOW).total,
        }

        def timed(module: ModuleType, text: str) -> tuple[float, SearchResult]:
            searching.bm25 = module
            try:
                started = time.perf_counter()
                found = searching.run_search(store, host, text, limit=10, now=NOW)
                return (time.perf_counter() - started) * 1000, found
            finally:
                searching.bm25 = after

        crafted: dict[str, list[float]] = {"before": [], "after": []}
        for run in range(args.runs):
            order = [("before", before), ("after", after)]
            for name, module in order if run % 2 == 0 else reversed(order):
                milliseconds, found = timed(module, query)
                assert found.ranking == "hybrid"
                crafted[name].append(milliseconds)
                print(f"crafted query, {name}: {milliseconds:.0f} ms", file=sys.stderr)
        ordinary: dict[str, list[float]] = {"before": [], "after": []}
        for text in (corpus.query(memories) for _ in range(args.queries)):
            answers = {}
            for name, module in (("before", before), ("after", after)):
                milliseconds, answers[name] = timed(module, text)
                ordinary[name].append(milliseconds)
            # The bounds are far above ordinary queries: the hits must not change.
            assert answers["before"] == answers["after"], "an ordinary query ranked differently"
        host.shutdown(timeout=1)
    return crafted_report(args, outline, crafted, ordinary)


def crafted_report(
    args: argparse.Namespace,
    outline: dict[str, int],
    crafted: dict[str, list[float]],
    ordinary: dict[str, list[float]],
) -> str:
    """The Markdown page of the crafted-query run."""
    medians = {name: statistics.median(values) for name, values in crafted.items()}
    usual = {name: statistics.median(values) for name, values in ordinary.items()}
    return "\n".join(
        [
            "# A crafted query, before and after the bounds on a query's work",
            "",
            "Written by `scripts/bench_search.py --crafted`. One search through",
            "`squirrel_mcp.server.searching.run_search` (what `search_memory` runs, minus the MCP round",
            "trip) on a real store of 3,000 memories, with a throwaway ranker plugin installed that scores",
            "every candidate, so the search scores every match as it does for a ranker by meaning.",
            f'"Before" is `squirrel_mcp/search.py` as of commit {args.before}, "after" this checkout;',
            "the two alternate run by run, in the same process, on the same store.",
            "",
            f"The query: the {outline['words']} three-letter prefixes most held in the vault's words,",
            f"{outline['length']} characters (the tool takes 1,000). Unbounded they match",
            f"{outline['unbounded']:,} terms; within the bounds {outline['terms']} terms count,",
            f"finding {outline['expansions']:,} longer terms. Hits: {outline['total']:,}.",
            "",
            "| Query | Before, median (ms) | After, median (ms) | Before / after |",
            "|---|---:|---:|---:|",
            f"| crafted, {args.runs} runs each | {medians['before']:,.0f} | {medians['after']:,.0f} "
            f"| {medians['before'] / medians['after']:,.0f} |",
            f"| ordinary, {args.queries} queries of 1 to 4 words | {usual['before']:.2f} | "
            f"{usual['after']:.2f} | {usual['before'] / usual['after']:.2f} |",
            "",
            "Every ordinary query gave the same answer before and after (the script checks it).",
            "Absolute times depend on the machine and on what else runs on it; the ratio, from",
            "runs that alternate, is the figure to compare.",
            "The corpus and the ordinary queries are those of the search-latency benchmark",
            f"(docs/benchmarks.md), seed {args.seed}.",
            "",
            f"- Python {platform.python_version()} ({platform.python_implementation()}), "
            f"{platform.platform()}, {platform.machine()}",
            "",
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run every size and write the report (or, with --crafted, the crafted-query report)."""
    args = parse_args(argv)
    if args.crafted:
        output = args.output or CRAFTED_OUTPUT
        output.write_text(run_crafted(args))
        print(f"wrote {output}", file=sys.stderr)
        return 0
    args.output = args.output or DEFAULT_OUTPUT
    results = []
    for size in args.sizes:
        corpus = Corpus(args.seed + size)
        result = run_size(corpus, size, args.queries)
        times = result["times"]
        assert isinstance(times, dict)
        summary = ", ".join(f"{name} {statistics.median(values):.3f} ms" for name, values in times.items())
        print(f"{size:>7,} memories: median {summary}", file=sys.stderr)
        results.append(result)
    # bench_hybrid.py writes the page's last section; a run of this script alone keeps it.
    kept = args.output.read_text() if args.output.exists() else ""
    kept = kept[kept.index(HYBRID_HEADING) :] if HYBRID_HEADING in kept else ""
    args.output.write_text(report(results, args) + ("\n" + kept if kept else ""))
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
