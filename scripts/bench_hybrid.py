"""Benchmark hybrid search (squirrel-mcp-embeddings) with the real model.

Per size (1k, 10k, 100k warm memories): the time of one search as the server
runs it (the word search over every match, then the plugin's rank_memories:
the query embedded, cosines by one matrix product, the fused order), median
and p95, next to the bare query-embedding time measured on the same queries in
the same run (the floor a search cannot beat). Also: the vector file's save and
load times, the process's peak RSS with the model loaded at 10k, and the
model's embedding speed on memories (the warm-up's work).

The memories are the recall corpus (tests/recall/corpus.json), repeated to size;
each repeat's vectors are the originals' plus a little noise (cosine about 0.95
to the original), so how many memories pass the floor per query is realistic
without embedding 100,000 texts. The report is written as the last section of
docs/benchmarks.md (`nox -s bench` runs this after bench_search.py, which
rewrites that file) and in full to docs/benchmarks/hybrid.md.
"""

from __future__ import annotations

import argparse
import json
import operator
import os
import platform
import resource
import statistics
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from squirrel_mcp.core.models import Revision
from squirrel_mcp.search import bm25
from squirrel_mcp.search.index import SearchIndex
from squirrel_mcp.search.ranking import RankOptions
from squirrel_mcp_embeddings import embedder, hooks, ranker, vectors, warmup

ROOT = Path(__file__).resolve().parent.parent
RECALL = ROOT / "tests" / "recall"
HEADING = "## Hybrid search (squirrel-mcp-embeddings)"
NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)
SEED = 20261130


class Reader:
    """The part of MemoryReader the plugin uses, over a list of revisions."""

    def __init__(self, memories: list[Revision]) -> None:
        self._memories = memories
        self._by_id = {memory.id: memory for memory in memories}
        self.account_id = "0" * 32

    def current(self) -> list[Revision]:
        return list(self._memories)

    def get(self, memory_id: str) -> Revision | None:
        return self._by_id.get(memory_id)

    def derive_key(self, purpose: str) -> bytes:
        return bytes(32)


def corpus_memories(n: int) -> list[Revision]:
    corpus = json.loads((RECALL / "corpus.json").read_text(encoding="utf-8"))
    memories = []
    for k in range(n):
        source = corpus[k % len(corpus)]
        stamp = (NOW - timedelta(days=source["ageDays"])).isoformat().replace("+00:00", "Z")
        copy = k // len(corpus)
        memories.append(
            Revision(
                id=f"{k:016x}",
                entity=source["entity"],
                text=source["text"] if copy == 0 else f"{source['text']} (copy {copy})",
                tags=source["tags"],
                keywords=source["keywords"],
                category=source["category"],
                createdAt=stamp,
                updatedAt=stamp,
                revision=1,
                change="created",
            )
        )
    return memories


def percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(share * len(ordered)) - 1))]


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_size(
    model: embedder.Embedder, base: vectors.Matrix, n: int, queries: list[str], scratch: Path
) -> dict[str, float]:
    memories = corpus_memories(n)
    rng = np.random.default_rng(SEED + n)
    rows = np.resize(base, (n, base.shape[1])).astype(np.float32)
    rows[len(base) :] += rng.normal(0, 0.013, rows[len(base) :].shape).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    manifest = model.manifest
    stamp = vectors.Stamp(manifest.model, hooks.manifest_sha256(), warmup.RECIPE_VERSION, manifest.dimensions)
    path = scratch / f"vectors-{n}.bin"
    hybrid = ranker.Hybrid(
        model,
        Reader(memories),  # type: ignore[arg-type]
        print,
        stamp=stamp,
        floor=manifest.min_similarity,
        span=manifest.semantic_span,
        path=path,
    )
    hybrid.table.put_many(((m.id, m.revision) for m in memories), rows)
    hybrid.pending.clear()
    saves, loads = [], []
    for _ in range(5):
        began = time.perf_counter()
        vectors.save(path, hybrid.table, bytes(32), "0" * 32, stamp)
        saves.append(time.perf_counter() - began)
        began = time.perf_counter()
        loaded = vectors.load(path, bytes(32), "0" * 32, stamp)
        loads.append(time.perf_counter() - began)
        assert loaded is not None
        assert len(loaded) == n
    index = SearchIndex(memories)

    def one_search(query: str) -> float:
        began = time.perf_counter()
        outcome = bm25.search(index, query, NOW, limit=None)
        options = RankOptions(10, False, None, (), NOW)
        answer = hybrid.rank(query, outcome.hits, outcome.total, options)
        assert answer is not None
        assert answer.ranking == "hybrid"
        return time.perf_counter() - began

    def one_embedding(query: str) -> float:
        began = time.perf_counter()
        model.embed([query])
        return time.perf_counter() - began

    for query in queries[:10]:
        one_search(query)
    searches, embeddings = [], []
    for n_query, query in enumerate(queries):
        # Alternate which runs first, so neither always meets a warmer cache.
        if n_query % 2:
            searches.append(one_search(query))
            embeddings.append(one_embedding(query))
        else:
            embeddings.append(one_embedding(query))
            searches.append(one_search(query))
    return {
        "memories": n,
        "search_median_ms": 1000 * statistics.median(searches),
        "search_p95_ms": 1000 * percentile(searches, 0.95),
        # Each search beside the embedding of its own query, timed next to it: what ranking adds.
        "beyond_median_ms": 1000 * statistics.median(map(operator.sub, searches, embeddings)),
        "embed_median_ms": 1000 * statistics.median(embeddings),
        "embed_p95_ms": 1000 * percentile(embeddings, 0.95),
        "save_ms": 1000 * statistics.median(saves),
        "load_ms": 1000 * statistics.median(loads),
        "file_mb": path.stat().st_size / 1e6,
        "peak_rss_mb": peak_rss_mb(),
    }


def report(rows: list[dict[str, float]], speed: dict[str, float], rss_model: float) -> str:
    per_memory = speed["ms_per_memory"]
    lines = [
        HEADING,
        "",
        "Written by `scripts/bench_hybrid.py` (`nox -s bench`), with the shipped model "
        f"({speed['model']}, full precision, ONNX Runtime on the CPU).",
        "",
        "| warm memories | hybrid search median ms | p95 ms "
        "| anchor: query embedding alone median ms | p95 ms | beyond the embedding, median ms "
        "| vector file save ms | load ms | file MB | peak RSS MB |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['memories']:,} | {row['search_median_ms']:.1f} | {row['search_p95_ms']:.1f} "
            f"| {row['embed_median_ms']:.1f} | {row['embed_p95_ms']:.1f} | {row['beyond_median_ms']:.1f} "
            f"| {row['save_ms']:.0f} "
            f"| {row['load_ms']:.0f} | {row['file_mb']:.1f} | {row['peak_rss_mb']:.0f} |"
        )
    lines += [
        "",
        f"- Peak RSS after the model loaded, before any memory: {rss_model:.0f} MB. The peak RSS column "
        "is the process's peak so far (Linux `ru_maxrss`), so the 10k row is the figure with the model "
        "loaded at 10,000 memories (index, vectors and model).",
        f"- Embedding memories (the warm-up's work): {per_memory:.2f} ms per memory in batches of "
        f"{warmup.WARM_UP_BATCH}, measured on {speed['count']:,} recall-corpus memories with the "
        f"plugin's runtime ({hooks.RUNTIME_THREADS} thread per inference); so 5,000 memories take about "
        f"{5000 * per_memory / 1000:.0f} s. The warm-up runs "
        "in the background on one thread; its timeline is in docs/benchmarks/warmup.md.",
        "- A search is the server's two steps: `bm25.search` over every word match (an installed ranker "
        "gets them all), then the plugin's `rank_memories` (query embedded, one matrix product, fused order, "
        "limit 10). The MCP round trip over stdio is not included. Queries: the recall set's "
        f"{rows[0]['queries']:.0f} queries (the first 10 once untimed first), each timed once, search and "
        "bare embedding alternating which runs first. Median and p95 by nearest rank.",
        "- Beyond the embedding: the median over queries of each search's time minus the bare embedding "
        "of the same query timed next to it, so what the word search and the fused ranking add (the "
        "target at 100,000 is 15 ms).",
        "- Memories: the recall corpus repeated to size; each repeat's vector is the original's plus "
        "Gaussian noise (cosine about 0.95), so the number of memories above the floor per query is "
        "realistic.",
        "- The bare query embedding is timed in the same run as the searches of its row, so on a shared "
        "machine compare each search with the embedding in its own row: its drift between rows shows how "
        "the load varied.",
        "- Save: `vectors.save` (seal with AES-256-GCM, temp file, fsync, rename); load: `vectors.load` "
        "(read, open, parse). Median of 5.",
        f"- Python {platform.python_version()}, {platform.platform()}, {os.cpu_count()} CPUs.",
        "",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "benchmarks.md")
    args = parser.parse_args(argv)
    model = embedder.load(threads=hooks.RUNTIME_THREADS)
    rss_model = peak_rss_mb()
    queries = [query["query"] for query in json.loads((RECALL / "queries.json").read_text(encoding="utf-8"))]
    corpus = corpus_memories(500)
    texts = [warmup.recipe(memory) for memory in corpus]
    model.embed(texts[:32])
    began = time.perf_counter()
    base = np.concatenate(
        [model.embed(texts[i : i + warmup.WARM_UP_BATCH]) for i in range(0, len(texts), warmup.WARM_UP_BATCH)]
    )
    speed = {"ms_per_memory": 1000 * (time.perf_counter() - began) / len(texts), "count": len(texts)}
    speed_report = {**speed, "model": model.manifest.model}
    rows = []
    with tempfile.TemporaryDirectory(prefix="squirrel-bench-") as scratch:
        for size in (int(s) for s in args.sizes.split(",")):
            row = run_size(model, base, size, queries, Path(scratch))
            row["queries"] = len(queries)
            rows.append(row)
            print(json.dumps(row), flush=True)
    section = report(rows, speed_report, rss_model)  # type: ignore[arg-type]
    (ROOT / "docs" / "benchmarks").mkdir(exist_ok=True)
    (ROOT / "docs" / "benchmarks" / "hybrid.md").write_text(section[1:])
    text = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
    if HEADING in text:
        text = text[: text.index(HEADING)]
    args.output.write_text(text.rstrip("\n") + "\n\n" + section, encoding="utf-8")
    print(section)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
