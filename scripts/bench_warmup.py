"""Benchmark the embeddings warm-up (squirrel-mcp-embeddings) and the server's peak memory with the model.

Part 1, the warm-up timeline at 10,000 memories, in this process with the shipped model
started as the plugin starts it (one runtime thread per inference): the plugin's warm-up
thread embeds every memory while searches run one after another (the server's two steps,
`bm25.search` then the plugin's `rank_memories`), each timed, with how many memories
were embedded when it answered. Then the same number of searches once warm. Then, on the
same texts in the same order and batches, a bare `InferenceSession.run` over the
pre-tokenized batches (one thread, as the warm-up; and the runtime's default threads),
which is the floor the warm-up's total time is compared with.

Part 2, peak RSS with the model: for 10,000 and 100,000 memories, a vault is seeded and its
vector file written beforehand (the recall corpus's vectors, repeated with noise, as
bench_hybrid.py does: embedding 100,000 texts would take most of an hour on 2 cores),
then the real server starts over stdio with the plugin, loads model and vectors, answers
20 searches, and its peak resident set (VmHWM of /proc/<pid>/status) is read before it
exits. The same with the plugin off gives the share that is not the plugin's.

Writes docs/benchmarks/warmup.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import numpy as np
from mcp import Client, StdioServerParameters

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_hybrid

from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.book.reader import MemoryReader
from squirrel_mcp.core import heap
from squirrel_mcp.core.models import Revision
from squirrel_mcp.keys import crypto
from squirrel_mcp.search import bm25
from squirrel_mcp.search.index import SearchIndex
from squirrel_mcp.search.ranking import RankOptions
from squirrel_mcp.storage.local import LocalVault
from squirrel_mcp_embeddings import embedder, hooks, integrity, ranker, vectors, warmup

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "docs" / "benchmarks" / "warmup.md"
PASSPHRASE = "bench-warmup passphrase"
CHEAP_KDF = crypto.KdfParams(salt=b"b" * crypto.SALT_BYTES, n=2**14)
# Between two searches during the warm-up: an agent does not search back to back.
PAUSE = 0.25
# How often the first start's RSS is read.
SAMPLE_EVERY = 0.1


def search_once(index: SearchIndex, hybrid: ranker.Hybrid, query: str) -> tuple[float, int, str | None]:
    """One search as the server runs it: seconds, memories embedded at its answer, its ranking label."""
    began = time.perf_counter()
    outcome = bm25.search(index, query, bench_hybrid.NOW, limit=None)
    answer = hybrid.rank(
        query, outcome.hits, outcome.total, RankOptions(10, False, None, (), bench_hybrid.NOW)
    )
    seconds = time.perf_counter() - began
    done = answer.progress.done if answer is not None and answer.progress is not None else len(hybrid.live)
    return seconds, done, None if answer is None else answer.ranking


def timeline(model: embedder.Embedder, n: int, queries: list[str], scratch: Path) -> dict[str, Any]:
    """The warm-up of n memories with searches meanwhile, then as many searches warm."""
    memories = bench_hybrid.corpus_memories(n)
    manifest = model.manifest
    stamp = vectors.Stamp(manifest.model, hooks.manifest_sha256(), warmup.RECIPE_VERSION, manifest.dimensions)
    hybrid = ranker.Hybrid(
        model,
        bench_hybrid.Reader(memories),  # type: ignore[arg-type]
        print,
        stamp=stamp,
        floor=manifest.min_similarity,
        span=manifest.semantic_span,
        path=scratch / "vectors.bin",
    )
    index = SearchIndex(memories)
    # The CPU time of the warm-up's batches, on its own thread: unlike wall-clock time, not
    # stretched by the searches meanwhile or by other processes on a shared machine.
    cpu = [0.0]
    embed = hybrid._embed

    def timed(batch: Sequence[Revision]) -> vectors.Matrix:
        began = time.thread_time()
        made = embed(batch)
        cpu[0] += time.thread_time() - began
        return made

    hybrid._embed = timed  # type: ignore[method-assign]
    during: list[tuple[float, float, int]] = []
    began = time.perf_counter()
    hybrid.start_warm_up()
    k = 0
    while hybrid.pending:
        at = time.perf_counter() - began
        seconds, done, _ = search_once(index, hybrid, queries[k % len(queries)])
        during.append((at, seconds, done))
        k += 1
        time.sleep(PAUSE)
    with hybrid._stored:
        while hybrid.pending:
            hybrid._stored.wait()
    warm_seconds = time.perf_counter() - began
    hybrid.stop_warm_up()
    after = [search_once(index, hybrid, queries[j % len(queries)])[0] for j in range(len(during))]
    return {
        "during": during,
        "after": after,
        "warm_seconds": warm_seconds,
        "warm_cpu": cpu[0],
        "memories": memories,
    }


def bare_runtime(model: embedder.Embedder, texts: Sequence[str], threads: int | None) -> tuple[float, float]:
    """Seconds a bare InferenceSession.run takes over the texts, pre-tokenized in the warm-up's batches.

    Wall-clock, and CPU: of this thread with one runtime thread (it runs the inference),
    of the process with more.
    """
    runtime = embedder.import_runtime()
    options = runtime.SessionOptions()
    options.log_severity_level = 3
    if threads is not None:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = threads
    files = integrity.read_checked(model.manifest, integrity.model_dir())
    session = runtime.InferenceSession(
        files[model.manifest.onnx_file], sess_options=options, providers=["CPUExecutionProvider"]
    )
    del files
    feeds = []
    for start in range(0, len(texts), warmup.WARM_UP_BATCH):
        encodings = model._tokenizer.encode_batch(list(texts[start : start + warmup.WARM_UP_BATCH]))
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds.append({"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})
    session.run([model.manifest.onnx_output], feeds[0])
    cpu_clock = time.thread_time if threads == 1 else time.process_time
    began, began_cpu = time.perf_counter(), cpu_clock()
    for feed in feeds:
        session.run([model.manifest.onnx_output], feed)
    return time.perf_counter() - began, cpu_clock() - began_cpu


# Peak RSS of the real server ---------------------------------------------------


def seed(path: Path, n: int, model: embedder.Embedder, cache: Path, vector_file: bool = True) -> None:
    """A vault of n corpus memories; with `vector_file`, its vector file (noisy copies of the corpus's)."""
    store = MemoryStore.create(LocalVault(path, create=True), PASSPHRASE, CHEAP_KDF)
    store._log.storage._db.execute("PRAGMA synchronous = OFF")  # type: ignore[attr-defined]
    memories = bench_hybrid.corpus_memories(n)
    for memory in memories:
        store.import_history([memory])
    if not vector_file:
        store._log.storage.close()
        return
    base = model.embed([warmup.recipe(memory) for memory in memories[:500]])
    rows = np.resize(base, (n, base.shape[1])).astype(np.float32)
    rng = np.random.default_rng(bench_hybrid.SEED + n)
    rows[len(base) :] += rng.normal(0, 0.013, rows[len(base) :].shape).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    manifest = model.manifest
    stamp = vectors.Stamp(manifest.model, hooks.manifest_sha256(), warmup.RECIPE_VERSION, manifest.dimensions)
    table = vectors.VectorTable(manifest.dimensions)
    table.put_many(((m.id, m.revision) for m in memories), rows)
    reader = MemoryReader(store)
    path_of_vectors = vectors.vector_path(store.account_id, {vectors.CACHE_DIR_VARIABLE: str(cache)})
    vectors.save(path_of_vectors, table, reader.derive_key(vectors.KEY_PURPOSE), store.account_id, stamp)
    store._log.storage.close()


def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise LookupError(field)


def server_parameters(vault: Path, cache: Path, plugins: str) -> StdioServerParameters:
    env = {
        **{key: value for key, value in os.environ.items() if key in ("PATH", "LANG", "HOME")},
        "SQUIRREL_VAULT": str(vault),
        "SQUIRREL_PASSPHRASE": PASSPHRASE,
        "SQUIRREL_MCP_PLUGINS": plugins,
        "SQUIRREL_MEMORY_CACHE_DIR": str(cache),
        # A server of its own, bare ONNX Runtime's peer (scripts/bench_shared.py measures the bridges).
        "SQUIRREL_MCP_SHARED": "0",
    }
    return StdioServerParameters(command=sys.executable, args=["-m", "squirrel_mcp"], env=env)


async def server_peak(vault: Path, cache: Path, plugins: str, queries: list[str]) -> dict[str, Any]:
    """Start the server on `vault`; once it ranks warm (or lexically), 20 searches; its VmHWM and VmRSS."""
    async with Client(server_parameters(vault, cache, plugins)) as client:
        began = time.perf_counter()
        while True:
            result = await client.call_tool("search_memory", {"query": queries[0]})
            found = result.structured_content or {}
            ready = found.get("ranking") == "hybrid" and "note" not in found
            if (
                ready
                or (not plugins and time.perf_counter() - began > 5)
                or time.perf_counter() - began > 900
            ):
                break
            await anyio.sleep(0.5)
        for query in queries[:20]:
            await client.call_tool("search_memory", {"query": query})
        (pid,) = server_pids()
        return {
            "hwm_mb": status_kib(pid, "VmHWM") / 1024,
            "rss_mb": status_kib(pid, "VmRSS") / 1024,
            "ranking": found.get("ranking"),
        }


async def first_start(vault: Path, cache: Path, queries: list[str]) -> dict[str, Any]:
    """The server's first start with the plugin on `vault` (no vector file in `cache`).

    Searches one after another (PAUSE apart) until one ranks hybrid with no note: the
    warm-up has embedded every memory. Meanwhile the server's VmRSS is read every
    SAMPLE_EVERY seconds; at the end its VmHWM (peak) and the seconds until warm.
    """
    samples: list[tuple[float, float]] = []
    async with Client(server_parameters(vault, cache, "embeddings")) as client:
        (pid,) = server_pids()
        began = time.perf_counter()

        async def sample() -> None:
            while True:
                samples.append((time.perf_counter() - began, status_kib(pid, "VmRSS") / 1024))
                await anyio.sleep(SAMPLE_EVERY)

        async with anyio.create_task_group() as group:
            group.start_soon(sample)
            k = 0
            while time.perf_counter() - began < 3600:
                result = await client.call_tool("search_memory", {"query": queries[k % len(queries)]})
                found = result.structured_content or {}
                k += 1
                if found.get("ranking") == "hybrid" and "note" not in found:
                    break
                await anyio.sleep(PAUSE)
            warm = time.perf_counter() - began
            group.cancel_scope.cancel()
        if found.get("ranking") != "hybrid" or "note" in found:
            # A start that never ranked by meaning measured no warm-up: no figure, rather than a wrong one.
            raise RuntimeError(f"the first start was not warm after {warm:.0f} s: {found.get('ranking')}")
        return {
            "hwm_mb": status_kib(pid, "VmHWM") / 1024,
            "rss_mb": status_kib(pid, "VmRSS") / 1024,
            "warm_seconds": warm,
            "searches": k,
            "samples": samples,
        }


def server_pids() -> list[int]:
    """This process's children running squirrel_mcp."""
    me = str(os.getpid())
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[1] == me and b"squirrel_mcp" in cmdline:
            found.append(int(entry.name))
    return found


def rss_rows(
    model: embedder.Embedder, sizes: list[int], first_sizes: set[int], queries: list[str], scratch: Path
) -> list[dict[str, Any]]:
    """Per size: peak RSS warm (vector file present), plugin off, and for `first_sizes` the first start.

    A first start's vault has no vector file: the server embeds every memory, and the warm
    start beside it is the next start of the same server on the vector file it wrote.
    """
    rows = []
    for n in sizes:
        vault, cache = scratch / f"vault-{n}.sqlite3", scratch / f"cache-{n}"
        began = time.perf_counter()
        seed(vault, n, model, cache, vector_file=n not in first_sizes)
        row: dict[str, Any] = {"memories": n, "seed_seconds": time.perf_counter() - began}
        if n in first_sizes:
            row["first"] = anyio.run(first_start, vault, cache, queries)
        row["with"] = anyio.run(server_peak, vault, cache, "embeddings", queries)
        row["without"] = anyio.run(server_peak, vault, cache, "", queries)
        rows.append(row)
        print(json.dumps({key: value for key, value in row.items() if key != "first"}), flush=True)
    return rows


# The report --------------------------------------------------------------------


def timeline_section(
    result: dict[str, Any], bare_one: tuple[float, float], bare_default: tuple[float, float]
) -> list[str]:
    during = [seconds for _, seconds, _ in result["during"]]
    after = result["after"]
    n = len(result["memories"])
    warm, cpu = result["warm_seconds"], result["warm_cpu"]
    p95_during, p95_after = bench_hybrid.percentile(during, 0.95), bench_hybrid.percentile(after, 0.95)
    lines = [
        f"## The warm-up at {n:,} memories",
        "",
        "| | seconds | anchor: bare ONNX Runtime, same texts and batches, 1 thread | ratio "
        "| bare, the runtime's default threads | ratio |",
        "|---|---:|---:|---:|---:|---:|",
        f"| every memory embedded (the warm-up thread, searches meanwhile), wall-clock | {warm:.1f} "
        f"| {bare_one[0]:.1f} | {warm / bare_one[0]:.2f}x "
        f"| {bare_default[0]:.1f} | {warm / bare_default[0]:.2f}x |",
        f"| the same, CPU seconds of the warm-up thread (tokenize, run, pool) | {cpu:.1f} "
        f"| {bare_one[1]:.1f} | {cpu / bare_one[1]:.2f}x "
        f"| {bare_default[1]:.1f} (process) | {cpu / bare_default[1]:.2f}x |",
        "",
        "| searches | count | median ms | p95 ms | max ms |",
        "|---|---:|---:|---:|---:|",
        f"| during the warm-up | {len(during)} | {1000 * statistics.median(during):.1f} "
        f"| {1000 * p95_during:.1f} | {1000 * max(during):.1f} |",
        f"| anchor: once warm | {len(after)} | {1000 * statistics.median(after):.1f} "
        f"| {1000 * p95_after:.1f} | {1000 * max(after):.1f} |",
        "",
        f"p95 during / p95 once warm: {p95_during / p95_after:.2f}x.",
        "",
        "Coverage over time (memories searchable by meaning when a search answered):",
        "",
        "| seconds since start-up | embedded | share | that search's ms |",
        "|---:|---:|---:|---:|",
    ]
    samples = result["during"]
    step = max(1, len(samples) // 12)
    for at, seconds, done in [*samples[::step], samples[-1]][:14]:
        lines.append(f"| {at:.1f} | {done:,} | {done / n:.0%} | {1000 * seconds:.1f} |")
    lines.append(f"| {warm:.1f} | {n:,} | 100% | (all embedded) |")
    return lines


def targets_section(
    result: dict[str, Any], bare_one: tuple[float, float], rows: list[dict[str, Any]]
) -> list[str]:
    """Each target of the warm-up and memory work beside this run's figure; a miss with what it measured."""
    during = [seconds for _, seconds, _ in result["during"]]
    after = result["after"]
    p95 = bench_hybrid.percentile(during, 0.95) / bench_hybrid.percentile(after, 0.95)
    lines = [
        "## Against the targets",
        "",
        "| target | this run | met |",
        "|---|---:|---|",
        f"| no search over 1.5 s during the warm-up | max {1000 * max(during):.0f} ms "
        f"(once warm: max {1000 * max(after):.0f} ms) | {'yes' if max(during) <= 1.5 else 'no'} |",
        f"| search p95 during the warm-up at most 2x its p95 once warm | {p95:.2f}x "
        f"| {'yes' if p95 <= 2 else 'no'} |",
        f"| every memory embedded within 1.3x bare ONNX Runtime (1 thread) "
        f"| {result['warm_seconds'] / bare_one[0]:.2f}x wall-clock, "
        f"{result['warm_cpu'] / bare_one[1]:.2f}x CPU "
        f"| {'yes' if result['warm_seconds'] <= 1.3 * bare_one[0] else 'no'} |",
    ]
    for row in rows:
        bound = 350 if row["memories"] <= 10_000 else 700
        for name, measured in starts_of(row, "first start", "warm start"):
            peak = measured["hwm_mb"]
            lines.append(
                f"| peak RSS with the model at {row['memories']:,}, {name}, at most {bound} MB "
                f"| {peak:.0f} MB (plugin off: {row['without']['hwm_mb']:.0f} MB) "
                f"| {'yes' if peak <= bound else 'no'} |"
            )
        if "first" in row and row["memories"] == len(result["memories"]):
            seconds = row["first"]["warm_seconds"]
            lines.append(
                f"| the real server's first start: every memory embedded within 1.3x bare ONNX Runtime "
                f"| {seconds:.1f} s = {seconds / bare_one[0]:.2f}x "
                f"| {'yes' if seconds <= 1.3 * bare_one[0] else 'no'} |"
            )
    return lines


def starts_of(row: dict[str, Any], first: str, warm: str) -> list[tuple[str, dict[str, Any]]]:
    """A row's starts with the plugin, named: the first start (where measured), then the warm one."""
    starts = [(first, row["first"])] if "first" in row else []
    return [*starts, (warm, row["with"])]


def rss_section(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "## Peak RSS of the server",
        "",
        "| memories | start | with the plugin: peak RSS MB | anchor: plugin off, peak RSS MB "
        "| the plugin's share MB | with the plugin: RSS at the end MB |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for row in rows:
        without = row["without"]
        warm_after = row["first"]["warm_seconds"] if "first" in row else 0.0
        first = f"first (no vector file; warm after {warm_after:.0f} s)"
        for name, measured in starts_of(row, first, "warm (vector file present)"):
            lines.append(
                f"| {row['memories']:,} | {name} | {measured['hwm_mb']:.0f} | {without['hwm_mb']:.0f} "
                f"| {measured['hwm_mb'] - without['hwm_mb']:.0f} | {measured['rss_mb']:.0f} |"
            )
    return lines


def first_start_section(rows: list[dict[str, Any]]) -> list[str]:
    """The first start's RSS over time: lowest and highest reading in each tenth of the warm-up."""
    lines: list[str] = []
    for row in rows:
        if "first" not in row:
            continue
        samples, warm = row["first"]["samples"], row["first"]["warm_seconds"]
        lines += [
            f"### RSS over time, first start at {row['memories']:,} memories (read every {SAMPLE_EVERY:g} s)",
            "",
            "| seconds since start-up | lowest RSS MB | highest RSS MB |",
            "|---|---:|---:|",
        ]
        step = warm / 10
        for k in range(10):
            inside = [mb for at, mb in samples if k * step <= at < (k + 1) * step]
            if inside:
                lines.append(
                    f"| {k * step:.0f}-{(k + 1) * step:.0f} | {min(inside):.0f} | {max(inside):.0f} |"
                )
        lines.append("")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=10_000, help="the warm-up timeline's size")
    parser.add_argument("--rss-sizes", default="10000,100000")
    parser.add_argument(
        "--first-sizes",
        default="10000,100000",
        help="sizes measured at a first start too (100,000 embeds every memory: about 15 min on 2 cores)",
    )
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    queries = [
        q["query"] for q in json.loads((bench_hybrid.RECALL / "queries.json").read_text(encoding="utf-8"))
    ]
    heap.return_large_blocks()  # as the server does before it starts the plugins
    model = embedder.load(threads=hooks.RUNTIME_THREADS)
    with tempfile.TemporaryDirectory(prefix="squirrel-bench-warmup-") as scratch:
        result = timeline(model, args.memories, queries, Path(scratch))
        print(
            json.dumps({"warm_seconds": result["warm_seconds"], "searches": len(result["during"])}),
            flush=True,
        )
        texts = [warmup.recipe(memory) for memory in result["memories"]]
        bare_one = bare_runtime(model, texts, 1)
        bare_default = bare_runtime(model, texts, None)
        print(
            json.dumps({"bare_one": bare_one, "bare_default": bare_default, "cpu": result["warm_cpu"]}),
            flush=True,
        )
        sizes = [int(size) for size in args.rss_sizes.split(",") if size]
        first_sizes = {int(size) for size in args.first_sizes.split(",") if size}
        rows = rss_rows(model, sizes, first_sizes, queries, Path(scratch))
    load = os.getloadavg()[0]
    lines = [
        "# The embeddings warm-up, and the server's memory with the model",
        "",
        "Written by `scripts/bench_warmup.py` (`nox -s bench`); each figure stands beside its anchor from "
        "the same run. Model: " + model.manifest.model + " (full precision, ONNX Runtime on the CPU, "
        f"{hooks.RUNTIME_THREADS} thread per inference as the plugin starts it), batches of "
        f"{warmup.WARM_UP_BATCH}.",
        "",
        *timeline_section(result, bare_one, bare_default),
        "",
        "- Memories: the recall corpus repeated to size (tests/recall/corpus.json), embedded from "
        "`entity: text (tags, keywords)`. The warm-up starts with the plugin's `start_warm_up` (what "
        "`startup` calls) and runs in its own thread; meanwhile one search after another (the recall "
        f"set's queries in turn, {PAUSE:g} s apart) runs as the server runs it: `bm25.search` over every "
        "word match, then the plugin's `rank_memories` (limit 10). The MCP round trip is not included.",
        "- Once warm: as many searches again, the warm-up thread stopped.",
        "- The bare runtime runs the same texts, tokenized beforehand (not timed), in the same batches, "
        "one after another with nothing else running: the floor of the warm-up's work.",
        "",
    ]
    if rows:
        lines += [
            *rss_section(rows),
            "",
            "- Each row: a vault seeded beforehand with that many corpus memories, and its vector file "
            "written beforehand (the corpus's 500 vectors repeated with noise, as in hybrid.md: the "
            "server loads them instead of embedding 100,000 texts). Then the real server (`python -m "
            "squirrel_mcp`) starts over stdio, unlocks, loads the model and the vectors, answers 20 "
            "searches once ranking is hybrid with no note; then its VmHWM (peak) and VmRSS are read from "
            "/proc. The anchor is the same vault with the plugin off (SQUIRREL_MCP_PLUGINS empty): the "
            "memories, the word index and the server itself.",
            "- A first start: the vault seeded the same way but no vector file. The real server starts "
            "with the plugin and embeds every memory while searches run one after another "
            f"({PAUSE:g} s apart) until one ranks hybrid with no note; its VmRSS is read every "
            f"{SAMPLE_EVERY:g} s meanwhile, its VmHWM at the end. The warm start of that size is the "
            "next start of the server on the vector file the first start wrote.",
            "",
            *first_start_section(rows),
        ]
    lines += [*targets_section(result, bare_one, rows), ""]
    lines += [
        "## Environment",
        "",
        f"- date (UTC): {time.strftime('%Y-%m-%d %H:%M', time.gmtime())}",
        f"- Python {platform.python_version()}, {platform.platform()}, {os.cpu_count()} CPUs",
        f"- load average (1 min) at the end: {load:.2f} (a shared machine: compare ratios within this run)",
        "",
    ]
    args.output.write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
