"""What the look before every operation costs: a vault replaced, deleted or edited under a running process.

Before each operation the memory store asks its log whether another program changed
the vault's file (`Log.look`: an lstat, SQLite's `data_version`, and the log's tail
when another connection committed). Measured in process on real vaults of 10,000
and 100,000 records (sealed records of random bytes: the look never decrypts),
side by side with the pull every operation already made:

- a look when nothing changed (the usual case);
- a look after another connection appended one record (the tail is read);
- the pull with nothing new, for scale.

Medians over many calls, in microseconds. Figures go to docs/benchmarks/vault-look.md.
Run with `nox -s bench` (or `python scripts/bench_vault_look.py`).
"""

from __future__ import annotations

import argparse
import os
import platform
import secrets
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from squirrel_mcp.book.log import Log
from squirrel_mcp.storage import SealedRecord
from squirrel_mcp.storage.local import LocalVault

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "docs" / "benchmarks" / "vault-look.md"
SIZES = (10_000, 100_000)
# About a sealed memory of a few sentences.
CIPHERTEXT_BYTES = 400
BATCH = 1000


def record(number: int) -> SealedRecord:
    return SealedRecord(f"{number:016x}", 1, secrets.token_bytes(CIPHERTEXT_BYTES))


def fill(path: Path, count: int) -> None:
    vault = LocalVault(path, create=True)
    for start in range(0, count, BATCH):
        vault.append([record(number) for number in range(start, min(start + BATCH, count))])
    vault.close()


def median_us(function: Callable[[], object], calls: int) -> float:
    times = []
    for _ in range(calls):
        started = time.perf_counter_ns()
        function()
        times.append(time.perf_counter_ns() - started)
    return statistics.median(times) / 1000


def measure(count: int, calls: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "vault.sqlite3"
        fill(path, count)
        log = Log(LocalVault(path, create=False), "0" * 32, bytes(32), None)
        log.pull()
        assert log.look() is None  # the first look reads the tail once
        quiet = median_us(log.look, calls)
        pull = median_us(log.pull, calls)
        other = LocalVault(path, create=False)
        after_write = []
        for number in range(count, count + min(calls, 200)):
            other.append([record(number)])
            started = time.perf_counter_ns()
            assert log.look() is None
            after_write.append(time.perf_counter_ns() - started)
            log.pull()
        other.close()
        log.storage.close()
    return {"quiet": quiet, "after_write": statistics.median(after_write) / 1000, "pull": pull}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    arguments = parser.parse_args()
    rows = [(count, measure(count, arguments.calls)) for count in SIZES]
    load = os.getloadavg()[0]
    lines = [
        "# The look before every operation",
        "",
        "`python scripts/bench_vault_look.py` (in process, real SQLite vaults of sealed records;",
        f"medians in µs; {platform.python_version()}, {platform.machine()}, load {load:.1f},",
        f"{datetime.now(UTC):%Y-%m-%d}). A look when nothing changed is an lstat and a pragma;",
        "after another connection wrote, the log's tail is read too (a count over the smallest",
        "index and one lookup). The pull with nothing new is what every operation already cost.",
        "",
        "| records | look, nothing changed | look after another process wrote | pull, nothing new |",
        "|---:|---:|---:|---:|",
    ]
    for count, figures in rows:
        lines.append(
            f"| {count:,} | {figures['quiet']:.1f} | {figures['after_write']:.1f} | {figures['pull']:.1f} |"
        )
    OUTPUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
