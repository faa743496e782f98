"""Import of an export file into an account on the sync server, now and before it batched.

Part of scripts/bench_sync.py (its docs/benchmarks/sync.md's import table): on
SQLite at the server's default rate limit, in process
(`squirrel_mcp.book.transfer.import_export` over `RemoteStorage`, cheap key
derivation): now (one pull, then appends of up to 500 records across memories),
and before (each memory on its own: a pull, an append and a pull, what import
did until it batched, replayed through `MemoryStore.import_history` one memory
at a time) for the sizes `--before-sizes` names, since that path takes minutes.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from bench_search import Corpus
from bench_sync import DEFAULT_RATE, issue_key, server

from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.book.transfer import ExportedMemory, ExportFile, import_export
from squirrel_mcp.keys import crypto
from squirrel_mcp.storage.remote import RemoteStorage
from squirrel_mcp.syncserver.app import Limits


def export_of(count: int) -> ExportFile:
    """An export of `count` synthetic memories (the corpus of scripts/bench_search.py), one revision each."""
    corpus = Corpus(seed=5)
    memories = [corpus.memory(number) for number in range(count)]
    return ExportFile(
        format="squirrel-mcp-export",
        version=1,
        exportedAt="2026-11-30T00:00:00.000Z",
        exportedBy="scripts/bench_sync.py",
        memories=[ExportedMemory(id=memory.id, revisions=[memory]) for memory in memories],
    )


def import_seconds(url: str, database_url: str, parsed: ExportFile, *, batched: bool) -> float:
    """Seconds to import `parsed` into a new account on the server (key issued and account made untimed)."""
    cheap = crypto.KdfParams(salt=os.urandom(crypto.SALT_BYTES), n=2**14)
    store = MemoryStore.create(RemoteStorage(url, issue_key(database_url)), "bench passphrase", kdf=cheap)
    started = time.perf_counter()
    if batched:
        report = import_export(store, parsed)
        added = report.added
    else:
        added = sum(store.import_history(memory.revisions)[0] for memory in parsed.memories)
    seconds = time.perf_counter() - started
    if added != len(parsed.memories):
        raise SystemExit(f"the import added {added} of {len(parsed.memories)} memories")
    return seconds


def measure_imports(
    temp: Path, sizes: list[int], before_sizes: list[int]
) -> list[tuple[int, float | None, float]]:
    """(memories, seconds before or None, seconds now) per size, on SQLite at the default rate limit."""
    database = f"sqlite:///{temp}/imports.sqlite3"
    rows = []
    with server(database, temp / "imports.log", DEFAULT_RATE) as (url, _, _):
        for size in sizes:
            parsed = export_of(size)
            before = import_seconds(url, database, parsed, batched=False) if size in before_sizes else None
            now = import_seconds(url, database, parsed, batched=True)
            print(f"import of {size:,} memories: before {before} s, now {now:.1f} s", flush=True)
            rows.append((size, before, now))
    return rows


def import_lines(imports: list[tuple[int, float | None, float]]) -> list[str]:
    """The table of the imports, now and before."""
    lines: list[str] = []
    lines += [
        "",
        f"### Import into the server, at its default rate limit ({Limits.rate:g} requests a second, "
        f"bursts of {Limits.burst})",
        "",
        "| Memories | Now: one pull, appends of up to 500 records "
        "| Before: a pull, an append, a pull per memory |",
        "|---:|---:|---:|",
    ]
    for size, before, now in imports:
        if before is not None:
            then = f"{before:,.1f} s ({before / now:,.0f}x as long)"
        else:
            rate = next((b / s for s, b, _ in imports if b is not None), None)
            then = (
                "not run"
                if rate is None
                else f"not run (about {rate * size / 60:,.0f} min at the rate above)"
            )
        lines.append(f"| {size:,} | {now:,.1f} s | {then} |")
    return lines
