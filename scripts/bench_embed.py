"""Embedding speed: the plugin's embed() next to bare ONNX Runtime, and the time to "ready".

What is measured, side by side in one run (the machine is shared, so only figures
from the same run are compared):

- ms per memory embedded by `Embedder.embed()` (tokenize, run, mean-pool,
  normalise) at batch sizes 1, 16 and 64, against a bare `InferenceSession.run`
  on the same already-tokenized inputs (the floor: the model's own arithmetic).
  Rounds alternate between the two; medians over rounds.
- the time to "ready" in a fresh process: import, read and check every model file
  against the manifest (size and SHA-256), start the runtime from those bytes and
  run it once. Also the checking step alone.

Inputs are the recall corpus's memories, built with the plugin's recipe
(`entity: text (tags, keywords)`). Figures go to docs/benchmarks/embeddings.md.
Run with `nox -s bench` (or `python scripts/bench_embed.py --rounds 7`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from squirrel_mcp_embeddings import embedder
from squirrel_mcp_embeddings.integrity import MANIFEST_NAME, PACKAGED_MODEL_DIR, read_checked, read_manifest

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "recall" / "corpus.json"
OUTPUT = ROOT / "docs" / "benchmarks" / "embeddings.md"
BATCH_SIZES = (1, 16, 64)

READY_PROBE = """
import time
start = time.perf_counter()
from squirrel_mcp_embeddings import embedder
embedder.load()
print(time.perf_counter() - start)
"""

CHECK_PROBE = """
import time
start = time.perf_counter()
from squirrel_mcp_embeddings.integrity import MANIFEST_NAME, PACKAGED_MODEL_DIR, read_checked, read_manifest
manifest = read_manifest(PACKAGED_MODEL_DIR / MANIFEST_NAME)
read_checked(manifest, PACKAGED_MODEL_DIR)
print(time.perf_counter() - start)
"""


def memory_texts(count: int) -> list[str]:
    """The first `count` corpus memories as the plugin embeds them."""
    memories = json.loads(CORPUS.read_text())[:count]
    texts = []
    for memory in memories:
        extras = ", ".join([*memory["tags"], *memory.get("keywords", [])])
        texts.append(f"{memory['entity']}: {memory['text']}" + (f" ({extras})" if extras else ""))
    return texts


def bare_feeds(model: embedder.Embedder, texts: list[str], batch: int) -> list[dict[str, np.ndarray]]:
    """The same batches the plugin feeds, tokenized ahead of time."""
    feeds = []
    for start in range(0, len(texts), batch):
        encodings = model._tokenizer.encode_batch(texts[start : start + batch])
        columns = {
            "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
            "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64),
        }
        feeds.append({name: columns[name] for name in model._inputs})
    return feeds


def per_memory_ms(seconds: float, count: int) -> float:
    """Milliseconds per memory."""
    return seconds * 1000 / count


Timings = dict[int, dict[str, list[float]]]


def time_embedding(model: embedder.Embedder, texts: list[str], rounds: int) -> Timings:
    """ms per memory for embed() and for bare session.run, per batch size, one list entry per round."""
    results: Timings = {b: {"plugin": [], "bare": []} for b in BATCH_SIZES}
    session = model._session
    output = model.manifest.onnx_output
    feeds = {batch: bare_feeds(model, texts, batch) for batch in BATCH_SIZES}
    for _ in range(rounds):
        for batch in BATCH_SIZES:
            start = time.perf_counter()
            model.embed(texts, batch_size=batch)
            results[batch]["plugin"].append(per_memory_ms(time.perf_counter() - start, len(texts)))
            start = time.perf_counter()
            for feed in feeds[batch]:
                session.run([output], feed)
            results[batch]["bare"].append(per_memory_ms(time.perf_counter() - start, len(texts)))
    return results


def time_probe(probe: str, runs: int) -> list[float]:
    """Seconds reported by `probe` in a fresh interpreter, `runs` times."""
    times = []
    for _ in range(runs):
        result = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=300
        )
        times.append(float(result.stdout.strip()))
    return times


def main() -> None:
    """Measure, then write the markdown."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds per batch size")
    parser.add_argument("--memories", type=int, default=128, help="memories embedded per round")
    parser.add_argument("--starts", type=int, default=5, help="fresh-process starts for time to ready")
    args = parser.parse_args()

    texts = memory_texts(args.memories)
    model = embedder.load()
    model.embed(texts[:8])  # warm the runtime's allocator before timing
    embedding = time_embedding(model, texts, args.rounds)
    ready = time_probe(READY_PROBE, args.starts)
    check = time_probe(CHECK_PROBE, args.starts)
    manifest = read_manifest(PACKAGED_MODEL_DIR / MANIFEST_NAME)
    model_bytes = sum(len(data) for data in read_checked(manifest, PACKAGED_MODEL_DIR).values())

    import onnxruntime

    lines = [
        "# Embedding speed",
        "",
        "Written by `scripts/bench_embed.py` (`nox -s bench`). The plugin's `embed()` (tokenize, run,",
        "mean-pool over real tokens, L2-normalise) next to a bare `InferenceSession.run` on the same",
        "already-tokenized batches, which is the floor `embed()` cannot beat. Rounds alternate",
        "between the two; figures are medians over rounds, in milliseconds per memory.",
        "",
        f"Model: {manifest.model} (full-precision ONNX, {model_bytes / 1e6:.1f} MB checked at every start).",
        f"Inputs: the first {len(texts)} memories of tests/recall/corpus.json, built as",
        "`entity: text (tags, keywords)`.",
        "",
        "| batch size | embed() ms/memory | bare onnxruntime ms/memory | embed() / bare (paired per round) |",
        "|---:|---:|---:|---:|",
    ]
    for batch in BATCH_SIZES:
        plugin = statistics.median(embedding[batch]["plugin"])
        bare = statistics.median(embedding[batch]["bare"])
        # The ratio is paired within each round (the two ran back to back), then the median.
        rounds = zip(embedding[batch]["plugin"], embedding[batch]["bare"], strict=True)
        paired = statistics.median(p / b for p, b in rounds)
        lines.append(f"| {batch} | {plugin:.2f} | {bare:.2f} | {paired:.2f}x |")
    lines += [
        "",
        "## Time to ready",
        "",
        f"In a fresh process, {args.starts} starts, median (min - max):",
        "",
        "| step | seconds |",
        "|---|---:|",
        f"| import, check every file (size + SHA-256), start the runtime from those bytes, one run "
        f"| {statistics.median(ready):.2f} ({min(ready):.2f} - {max(ready):.2f}) |",
        f"| of which: import and check the files only "
        f"| {statistics.median(check):.2f} ({min(check):.2f} - {max(check):.2f}) |",
        "",
        "The server does this in the plugin's background thread: the MCP handshake does not wait",
        "for it, and search is lexical until it is done.",
        "",
        "## Environment",
        "",
        f"- date (UTC): {datetime.now(UTC):%Y-%m-%d %H:%M}",
        f"- Python {platform.python_version()}, onnxruntime {onnxruntime.__version__}, "
        f"{platform.machine()}, {os.cpu_count()} CPUs",
        f"- load average (1 min) at the end: {os.getloadavg()[0]:.2f}",
        f"- rounds: {args.rounds}; raw ms/memory per round: "
        + "; ".join(
            f"batch {b}: embed {[round(x, 2) for x in embedding[b]['plugin']]}, "
            f"bare {[round(x, 2) for x in embedding[b]['bare']]}"
            for b in BATCH_SIZES
        ),
        "",
    ]
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
