"""Three hosts on one vault: one memory process (SQUIRREL_MCP_SHARED=1) beside one process per host.

For each way of running (a server per host, SQUIRREL_MCP_SHARED=0; the hosts'
bridges to one memory process, SQUIRREL_MCP_SHARED=1) and for 1 and 3 hosts:
a copy of one vault of `--memories` corpus memories (seeded beforehand, no
vector file: a first start, which embeds every memory), an empty cache
directory the hosts share, and that many `mcp.Client`s started together, each
running `python -m squirrel_mcp` as a host does, with the embeddings plugin.
Each host searches (2 s apart) until a search ranks hybrid with no note:
the warm-up is done for it. Meanwhile every process of that vault (servers,
bridges, the memory process) is read from /proc every 0.2 s:

- CPU until warm: the CPU seconds (user + system) of every such process, summed,
  when the last host is warm;
- RSS once warm: the sum of their VmRSS 2 s after that (the median of 5 reads);
- peak RSS: the highest sum of VmRSS read meanwhile, and the sum of their VmHWM.

The anchor of each row is one host with a server of its own (today's way), from
the same run. Written to docs/benchmarks/shared.md (`nox -s bench`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_warmup

REPO = Path(__file__).resolve().parent.parent
OUTPUT = REPO / "docs" / "benchmarks" / "shared.md"
SAMPLE_EVERY = 0.2
# Between one host's searches while it waits for the warm-up: the searches' own CPU stays a small share.
PAUSE = 2.0
TICKS = os.sysconf("SC_CLK_TCK")
TARGET = 1.2


@dataclass
class Reading:
    """What the /proc reads of one run saw."""

    cpu: dict[int, float] = field(default_factory=dict)
    hwm_kib: dict[int, int] = field(default_factory=dict)
    peak_mb: float = 0.0
    processes: set[int] = field(default_factory=set)


def processes_of(vault: Path) -> dict[int, Path]:
    """The live processes running squirrel_mcp with SQUIRREL_VAULT=`vault`."""
    wanted = f"SQUIRREL_VAULT={vault}".encode()
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if b"squirrel_mcp" not in (entry / "cmdline").read_bytes():
                continue
            if wanted not in (entry / "environ").read_bytes().split(b"\0"):
                continue
        except OSError:
            continue
        found[int(entry.name)] = entry
    return found


def read_once(vault: Path, reading: Reading) -> float:
    """One read of every process of `vault`: the sum of their VmRSS in MB (CPU and peaks noted)."""
    total_kib = 0
    for pid, entry in processes_of(vault).items():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            status = (entry / "status").read_text()
        except OSError:
            continue
        if fields[0] == "Z":
            continue
        reading.processes.add(pid)
        reading.cpu[pid] = (int(fields[11]) + int(fields[12])) / TICKS
        values = {
            line.split(":")[0]: line.split()[1] for line in status.splitlines() if line.startswith("Vm")
        }
        total_kib += int(values.get("VmRSS", 0))
        reading.hwm_kib[pid] = int(values.get("VmHWM", 0))
    mb = total_kib / 1024
    reading.peak_mb = max(reading.peak_mb, mb)
    return mb


def parameters(vault: Path, cache: Path, runtime: Path, shared: str) -> StdioServerParameters:
    env = {
        **{key: value for key, value in os.environ.items() if key in ("PATH", "LANG", "HOME")},
        "SQUIRREL_VAULT": str(vault),
        "SQUIRREL_PASSPHRASE": bench_warmup.PASSPHRASE,
        "SQUIRREL_MCP_PLUGINS": "embeddings",
        "SQUIRREL_MEMORY_CACHE_DIR": str(cache),
        "SQUIRREL_MCP_SHARED": shared,
        "SQUIRREL_MCP_SHARED_IDLE": "0",
        "XDG_RUNTIME_DIR": str(runtime),
    }
    return StdioServerParameters(command=sys.executable, args=["-m", "squirrel_mcp"], env=env)


async def run(seeded: Path, scratch: Path, hosts: int, shared: str, queries: list[str]) -> dict[str, Any]:
    """`hosts` hosts started together on a copy of `seeded`, first start; the figures of the docstring."""
    place = Path(tempfile.mkdtemp(prefix=f"run-{shared}-{hosts}-", dir=scratch))
    vault = place / "vault.sqlite3"
    shutil.copy(seeded, vault)
    cache, runtime = place / "cache", Path(tempfile.mkdtemp(prefix="sq-"))
    cache.mkdir()
    runtime.chmod(0o700)
    reading = Reading()
    warm_at: list[float] = []
    searches = [0]
    all_warm = anyio.Event()
    began = time.perf_counter()

    async def host(number: int) -> None:
        async with Client(parameters(vault, cache, runtime, shared)) as client:
            k = number
            while time.perf_counter() - began < 3600:
                result = await client.call_tool("search_memory", {"query": queries[k % len(queries)]})
                found = result.structured_content or {}
                k += 1
                searches[0] += 1
                if found.get("ranking") == "hybrid" and "note" not in found:
                    break
                await anyio.sleep(PAUSE)
            else:
                raise RuntimeError(f"host {number} was not warm within an hour")
            warm_at.append(time.perf_counter() - began)
            if len(warm_at) == hosts:
                all_warm.set()
            await all_warm.wait()
            await anyio.sleep(4.0)  # the reads once warm happen meanwhile

    async def sample() -> None:
        while True:
            read_once(vault, reading)
            await anyio.sleep(SAMPLE_EVERY)

    result: dict[str, Any] = {}
    async with anyio.create_task_group() as group:
        group.start_soon(sample)

        async def measure_once_warm() -> None:
            await all_warm.wait()
            result["cpu_s"] = sum(reading.cpu.values())
            await anyio.sleep(2.0)
            steady = []
            for _ in range(5):
                steady.append(read_once(vault, reading))
                await anyio.sleep(0.2)
            result["rss_mb"] = statistics.median(steady)
            result["hwm_sum_mb"] = sum(reading.hwm_kib.values()) / 1024

        group.start_soon(measure_once_warm)
        async with anyio.create_task_group() as clients:
            for number in range(hosts):
                clients.start_soon(host, number)
        group.cancel_scope.cancel()
    result.update(
        hosts=hosts,
        shared=shared == "1",
        warm_s=max(warm_at),
        peak_mb=reading.peak_mb,
        processes=len(reading.processes),
        searches=searches[0],
    )
    shutil.rmtree(runtime, ignore_errors=True)
    shutil.rmtree(place, ignore_errors=True)
    return result


def report(rows: list[dict[str, Any]], memories: int) -> str:
    anchor = next(row for row in rows if row["hosts"] == 1 and not row["shared"])
    lines = [
        "# Several hosts on one vault: one memory process, or a server per host",
        "",
        f"Written by `scripts/bench_shared.py` (`nox -s bench`): {memories:,} memories, a first start (no "
        "vector file: every memory is embedded), the embeddings plugin, one cache directory for the hosts "
        "of a run. Every ratio is to the anchor, one host with a server of its own, from this run.",
        "",
        "| way | hosts | processes seen | searches | CPU until warm, s | ratio | RSS once warm, MB | ratio | "
        "peak RSS (highest sum read), MB | sum of peaks (VmHWM), MB | wall until warm, s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        way = "one memory process (SQUIRREL_MCP_SHARED=1)" if row["shared"] else "a server per host"
        lines.append(
            f"| {way} | {row['hosts']} | {row['processes']} | {row['searches']} | {row['cpu_s']:.1f} | "
            f"{row['cpu_s'] / anchor['cpu_s']:.2f}x | {row['rss_mb']:.0f} | "
            f"{row['rss_mb'] / anchor['rss_mb']:.2f}x | "
            f"{row['peak_mb']:.0f} | {row['hwm_sum_mb']:.0f} | {row['warm_s']:.1f} |"
        )
    three = next(row for row in rows if row["hosts"] == 3 and row["shared"])
    cpu, rss = three["cpu_s"] / anchor["cpu_s"], three["rss_mb"] / anchor["rss_mb"]
    lines += [
        "",
        "## Against the targets",
        "",
        "| target | this run | met |",
        "|---|---:|---|",
        f"| three hosts, one memory process: CPU until warm within {TARGET}x one host's | {cpu:.2f}x | "
        f"{'yes' if cpu <= TARGET else 'no'} |",
        f"| three hosts, one memory process: RSS once warm within {TARGET}x one host's | {rss:.2f}x | "
        f"{'yes' if rss <= TARGET else 'no'} |",
        "",
        "- Processes seen: every process of the run's vault read at least once (servers; or bridges, and",
        "  the memory process with any that started beside it and left when it lost the vault's lock).",
        "- Searches: how many the hosts made until the last was warm (all of them count in the CPU).",
        "- CPU of a process that ended before the last host was warm counts up to its last read (0.2 s).",
        "",
        "## Environment",
        "",
        f"- date (UTC): {datetime.now(UTC):%Y-%m-%d %H:%M}",
        f"- Python {platform.python_version()}, {platform.platform()}, {os.cpu_count()} CPUs",
        f"- load average (1 min) at the end: {os.getloadavg()[0]:.2f} (compare ratios within this run)",
        "",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=3000)
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    queries = [
        q["query"]
        for q in json.loads((bench_warmup.bench_hybrid.RECALL / "queries.json").read_text(encoding="utf-8"))
    ]
    with tempfile.TemporaryDirectory(prefix="bench-shared-") as scratch_name:
        scratch = Path(scratch_name)
        seeded = scratch / "seeded.sqlite3"
        # No vector file: the model is not needed to seed.
        bench_warmup.seed(seeded, args.memories, None, scratch / "unused", vector_file=False)  # type: ignore[arg-type]
        rows = []
        for hosts, shared in [(1, "0"), (1, "1"), (3, "1"), (3, "0")]:
            row = anyio.run(run, seeded, scratch, hosts, shared, queries)
            print(row, flush=True)
            rows.append(row)
    args.output.write_text(report(rows, args.memories), encoding="utf-8")
    print(f"written {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
