"""How a long memory's passages are cut: sentences (as shipped) beside token windows, measured.

The long-memory set's vaults of scripts/bench_long_memories.py (the recall corpus and the
set's long memories, one vault per placing of the fact), searched in this process through
`run_search` (the function behind search_memory) with the embeddings plugin as the server
loads it, once every memory is embedded: once with the passages cut as shipped (passages.py,
sentences), once per size of WINDOWS with token windows sharing half their tokens instead.
Each text is embedded once for the whole run (a text's vector does not depend on its batch).

Writes its section of docs/benchmarks/long-memories.md, keeping the rest.

    python scripts/choose_passages.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_long_memories as bench

from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.core.config import Config
from squirrel_mcp.keys import crypto
from squirrel_mcp.plugins.manager import PluginHost, get_plugin_manager
from squirrel_mcp.server.searching import run_search
from squirrel_mcp.storage.local import LocalVault
from squirrel_mcp_embeddings import embedder, hooks, passages, vectors
from tests.long_memories import load
from tests.recall.corpus import CORPUS, NOW, revision

# How passages were chosen: the shipped cut (sentences) beside token windows of these sizes,
# each sharing half its tokens with the next.
WINDOWS = (32, 48, 64, 96, 128)


class Remembering:
    """The model, each text embedded once for the whole sweep (its vector does not depend on its batch)."""

    def __init__(self, model: embedder.Embedder) -> None:
        self.model = model
        self.manifest = model.manifest
        self.made: dict[str, Any] = {}

    def embed(self, texts: Sequence[str]) -> Any:
        new = [text for text in dict.fromkeys(texts) if text not in self.made]
        if new:
            self.made.update(zip(new, self.model.embed(new), strict=True))
        rows = np.array([self.made[text] for text in texts], dtype=np.float32)
        return rows.reshape(len(texts), self.manifest.dimensions)

    def fits(self, text: str) -> bool:
        return self.model.fits(text)

    def token_offsets(self, text: str) -> list[tuple[int, int]]:
        return self.model.token_offsets(text)


def windowed(size: int) -> Callable[..., list[str]]:
    """A cut into windows of `size` tokens sharing half of them, in place of sentences."""

    def cut(text: str, offsets: passages.Offsets, *_: int) -> list[str]:
        spans = passages.windows(len(offsets), size, size // 2)
        return [text[offsets[start][0] : offsets[end - 1][1]] for start, end in spans]

    return cut


def found_in_process(model: Remembering, scratch: Path) -> dict[str, list[bool]]:
    """Per placing, whether each question found its memory in the first 5, through `run_search`."""
    memories = load()
    found = {}
    for placing in bench.PLACINGS:
        saved, targets = bench.placed(memories, placing)
        os.environ[vectors.CACHE_DIR_VARIABLE] = str(scratch / f"sweep-{placing}")
        vault = LocalVault(scratch / f"sweep-{placing}-{time.monotonic_ns()}.sqlite3", create=True)
        store = MemoryStore.create(
            vault, bench.PASSPHRASE, crypto.KdfParams(salt=os.urandom(crypto.SALT_BYTES), n=2**14)
        )
        for memory in CORPUS:
            store.import_history([revision(memory)])
        ids = [store.save(entity=e, text=t, category="note", tags=[], keywords=[]).id for e, t in saved]
        pm = get_plugin_manager()
        plugin = hooks.EmbeddingsHooks(load=lambda: cast(embedder.Embedder, model))
        pm.register(plugin, name="embeddings")
        host = PluginHost(pm)
        host.start(Config.from_env(), store)
        if not host.wait_started(300) or plugin.hybrid is None:
            raise SystemExit("choose_passages: the plugin did not start in this process")
        plugin.hybrid.warm_all()
        answers = [run_search(store, host, m.question, limit=bench.TOP, now=NOW) for m in memories]
        found[placing] = [
            ids[target] in [hit.id for hit in answer.results]
            for target, answer in zip(targets, answers, strict=True)
        ]
        host.shutdown()
        plugin.hybrid.close()
        vault.close()
    return found


def sweep(scratch: Path) -> dict[str, dict[str, list[bool]]]:
    """found@5 per placing with sentences (as shipped) and with each size of WINDOWS instead."""
    model = Remembering(embedder.load(threads=1))
    results = {"sentences (as shipped)": found_in_process(model, scratch)}
    shipped = passages.passages
    try:
        for size in WINDOWS:
            # The warm-up cuts through this name: for this run, windows in place of sentences.
            passages.passages = windowed(size)
            results[f"windows of {size} tokens, {size // 2} shared"] = found_in_process(model, scratch)
            print(f"windows of {size}: done", file=sys.stderr)
    finally:
        passages.passages = shipped
    return results


def sweep_section(results: dict[str, dict[str, list[bool]]]) -> str:
    """The report's section on the cut: found@5 per placing for sentences and for each window."""
    count = len(load())
    lines = [
        bench.SWEEP_HEADING,
        "",
        "Written by `python scripts/choose_passages.py`. The same vaults as above (the",
        f"recall corpus and the {count} long memories, one vault per placing), searched in this",
        "process through `run_search` (the function behind search_memory) with the plugin as the",
        "server loads it, once every memory is embedded; the passages cut as shipped (sentences) or",
        "into token windows sharing half their tokens. found@5 per placing:",
        "",
        "| passages | own memory | first | middle | last |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, found in results.items():
        lines.append(
            f"| {name} | " + " | ".join(f"{statistics.fmean(found[p]):.3f}" for p in bench.PLACINGS) + " |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the sweep; print its section and write it into the report."""
    argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None).parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="squirrel-passages-") as scratch:
        section = sweep_section(sweep(Path(scratch)))
    bench.write(bench.REPORT, "", section)
    print(section)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
