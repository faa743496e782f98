"""Throughput and latency of the reference sync server, on SQLite and PostgreSQL.

What is measured, over loopback HTTP with one keep-alive `requests.Session` (one
client, as one squirrel-mcp process is), against the real `squirrel-mcp-sync serve`
process on a fresh database:

- `GET /v1/account`: one small authenticated read (what a start-up pays);
- appending one record of 400 bytes (about one memory's sealed revision) at a time,
  each a transaction of its own: what a save or a correction pays on the server;
- appending in batches of 500 records: what an import pays, as records per second;
- pulling everything with `GET /v1/records` from cursor 0, paged by 500: what a new
  machine pays on its first start, as records per second;
- `import` of an export file into an account on the server, at the server's default
  rate limit (SQLite only: the rate limit, not the database, sets its pace): see
  scripts/bench_sync_imports.py.

Latencies are per request (median and p90, nearest rank) after `WARMUP` untimed
requests. The batches' request bodies are made before their timing starts: what is
timed is the server's work and the round trips, not the client making up records.
Beside the wall-clock figures, the CPU time each batch and each page cost the server
process (and, on PostgreSQL, the database's backends serving this run's database),
read from /proc: on a machine shared with other jobs, the wall clock says how long
a batch waited as well as worked, and the CPU time says how much work it was.
PostgreSQL is measured when SQUIRREL_TEST_POSTGRES_URL names a cluster on this
machine (`nox -s bench` starts one with .ci/postgres); a database is created for each
round and dropped after. The report goes to docs/benchmarks/sync.md.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import secrets
import sqlite3
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import requests
from bench_sync_client import RECORD_BYTES, WARMUP, Client, measure, record_body
from bench_sync_machine import CpuMeter, environment_lines

from squirrel_mcp.syncserver.app import Limits

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = REPO / "docs" / "benchmarks" / "sync.md"

# Figures published on 2026-12-01 (one round, the machine then shared with other jobs), before
# this benchmark measured a baseline side by side: batches of 500 and pulls, records/s.
PUBLISHED = {"SQLite": (4078, 11150), "PostgreSQL": (777, 7197)}


@contextmanager
def postgres_database(admin_url: str) -> Iterator[str]:
    import psycopg

    name = f"squirrel_bench_{secrets.token_hex(4)}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        yield urlunsplit(urlsplit(admin_url)._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


UNLIMITED = ("--rate-limit", "1000000", "--burst", "1000000")
DEFAULT_RATE = ("--rate-limit", str(Limits.rate), "--burst", str(Limits.burst))
SYNC = [sys.executable, "-m", "squirrel_mcp.syncserver"]


def issue_key(database_url: str) -> str:
    """A new API key (an empty account slot) on the database."""
    env = {**os.environ, "SQUIRREL_SYNC_DATABASE": database_url}
    return subprocess.run(
        [*SYNC, "issue-key"], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()


@contextmanager
def server(
    database_url: str, log: Path, rate: tuple[str, ...] = UNLIMITED, source: str | None = None
) -> Iterator[tuple[str, str, int]]:
    """The installed server on `database_url`, or the one in `source` (a tree's base/ directory)."""
    env = {**os.environ, "SQUIRREL_SYNC_DATABASE": database_url}
    if source is not None:
        # Ahead of the installed package on the path: the server of that tree runs.
        env["PYTHONPATH"] = source
    command = SYNC
    key = issue_key(database_url)
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [*command, "serve", "--port", "0", *rate, "--no-access-log"],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while (match := re.search(r"serving (http://\S+)", log.read_text())) is None:
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the sync server did not start:\n{log.read_text()}")
            time.sleep(0.05)
        url = match.group(1)
        while True:
            try:
                requests.get(url + "/v1/health", timeout=5)
                break
            except requests.ConnectionError:
                time.sleep(0.05)
        yield url, key, process.pid
    finally:
        process.terminate()
        process.wait(timeout=30)


def baseline_tree(ref: str, temp: Path) -> str:
    """The base/ directory of commit `ref` of this repository, extracted under `temp`."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", ref, "base"], capture_output=True, check=True
    ).stdout
    target = temp / "baseline"
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(target, filter="data")
    return str(target / "base")


def side_by_side(
    fresh: Callable[[str], AbstractContextManager[str]],
    temp: Path,
    args: argparse.Namespace,
    baseline: str | None,
) -> dict[str, dict[str, float]]:
    """Medians over `args.rounds` rounds of `measure`: now and the baseline (if any), served at once."""
    servers = {"now": None} if baseline is None else {"before": baseline, "now": None}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in servers}
    for round_number in range(args.rounds):
        with ExitStack() as stack:
            clients = []
            for name, source in servers.items():
                tag = f"{name}-{round_number}"
                database = stack.enter_context(fresh(tag))
                url, key, pid = stack.enter_context(server(database, temp / f"{tag}.log", source=source))
                clients.append(Client(url, key, CpuMeter(pid, database)))
            for name, figures in zip(servers, measure(clients, args.singles, args.batches), strict=True):
                runs[name].append(figures)
    return {
        name: {figure: statistics.median(run[figure] for run in found) for figure in found[0]}
        for name, found in runs.items()
    }


def sizes(text: str) -> list[int]:
    """Comma-separated sizes ("300,3000"); empty for none."""
    return [int(part) for part in text.split(",") if part.strip()]


Results = dict[str, dict[str, dict[str, float]]]


Stages = dict[str, dict[str, float]]


def run(
    args: argparse.Namespace,
) -> tuple[Results, dict[str, str], list[tuple[int, float | None, float]], Stages]:
    """Every measurement the options ask for: (per database and server, versions, imports, stages)."""
    from bench_sync_stages import stages

    results: Results = {}
    found: Stages = {}
    bodies = [record_body(500) for _ in range(args.batches)]
    versions = {"sqlite": sqlite3.sqlite_version}
    with tempfile.TemporaryDirectory() as temp_name:
        temp = Path(temp_name)
        baseline = None if args.baseline is None else baseline_tree(args.baseline, temp)

        @contextmanager
        def sqlite_database(tag: str) -> Iterator[str]:
            yield f"sqlite:///{temp}/sync-{tag}.sqlite3"

        results["SQLite"] = side_by_side(sqlite_database, temp, args, baseline)
        found["SQLite"] = stages(f"sqlite:///{temp}/stages.sqlite3", bodies)
        admin_url = os.environ.get("SQUIRREL_TEST_POSTGRES_URL")
        if admin_url:
            import psycopg

            with psycopg.connect(admin_url) as connection:
                versions["postgresql"] = str(connection.execute("SHOW server_version").fetchone()[0])
            results["PostgreSQL"] = side_by_side(
                lambda _tag: postgres_database(admin_url), temp, args, baseline
            )
            with postgres_database(admin_url) as database:
                found["PostgreSQL"] = stages(database, bodies)
        else:
            print("bench_sync: SQUIRREL_TEST_POSTGRES_URL is unset; PostgreSQL not measured", file=sys.stderr)
        # Here, not at the top: bench_sync_imports uses this module's server.
        from bench_sync_imports import measure_imports

        imports = measure_imports(temp, args.import_sizes, args.before_sizes)
    return results, versions, imports, found


def report(
    args: argparse.Namespace,
    results: Results,
    versions: dict[str, str],
    imports: list[tuple[int, float | None, float]],
    found: Stages,
) -> str:
    """The page of docs/benchmarks/sync.md."""
    from bench_sync_imports import import_lines
    from bench_sync_stages import stage_lines

    lines = [
        "# Sync server",
        "",
        "The reference sync server (`squirrel-mcp-sync serve`) over loopback HTTP, one client",
        "with a keep-alive session, on a fresh database. Generated by `scripts/bench_sync.py`",
        "(`nox -s bench`).",
        "",
        "## Results",
        "",
        "| Database | Server | GET /v1/account median (p90), ms | Append 1 record median (p90), ms "
        "| Append in batches of 500, records/s | Pull all, records/s |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for name, label, r in table_rows(args, results):
        lines.append(
            f"| {name} | {label} | {r['account_median']:.1f} ({r['account_p90']:.1f}) "
            f"| {r['append_median']:.1f} ({r['append_p90']:.1f}) | {r['batch_rate']:,.0f} "
            f"| {r['pull_rate']:,.0f} ({int(r['pulled']):,} in {r['pull_seconds']:.2f} s) |"
        )
    lines += side_by_side_lines(args, results)
    lines += published_lines(results)
    lines += cpu_lines(args, results)
    lines += stage_lines(found, args.batches)
    lines += import_lines(imports)
    lines += [
        "",
        "Before batching, importing 300 memories took 86 s on 2026-11-30 (same machine), and 3,000",
        "would have taken about 14 minutes, with nothing shown meanwhile.",
        "",
        *method_lines(args),
        "",
        *environment_lines(
            f"- SQLite {versions['sqlite']}"
            + (f", PostgreSQL {versions['postgresql']}" if "postgresql" in versions else "")
        ),
    ]
    return "\n".join(lines)


def side_by_side_lines(args: argparse.Namespace, results: Results) -> list[str]:
    """Now against the baseline's server, each ratio from the same rounds (none without a baseline)."""
    if args.baseline is None:
        return []
    lines = ["", "Now against before, measured side by side (medians of the rounds):", ""]
    for name, servers in results.items():
        now, before = servers["now"], servers["before"]
        lines.append(
            f"- {name}: batches {now['batch_rate'] / before['batch_rate']:.1f}x, pull "
            f"{now['pull_rate'] / before['pull_rate']:.1f}x, one record's append median "
            f"{now['append_median']:.1f} ms against {before['append_median']:.1f} ms."
        )
    return lines


def method_lines(args: argparse.Namespace) -> list[str]:
    """The report's "How it was measured"."""
    return [
        "## How it was measured",
        "",
        f"- {args.singles} timed requests of each single kind after {WARMUP} untimed ones; a record is "
        f"{RECORD_BYTES} random bytes (about one memory's sealed revision). Each figure is the median of "
        f"{args.rounds} rounds, each on a fresh database"
        + (
            f"; the server of commit {args.baseline} ran beside this one in every round, each request"
            " to one followed by the same request to the other (who goes first alternating), so that"
            " the machine's changing load met both alike. "
            f"{args.baseline} is the last commit before the work measured here: each record of an append"
            " was its own INSERT after its own SELECT MAX(revision), and each transaction on PostgreSQL"
            " began with a round trip to test its pooled connection."
            if args.baseline
            else "."
        ),
        "- An append is one transaction; SQLite runs with `synchronous=FULL` (each append reaches the disk),",
        "  PostgreSQL is the throwaway test cluster of `.ci/postgres`, which runs with `fsync=off`: its",
        "  write figures are an upper bound for a durable production cluster.",
        f"- Batches: {args.batches} appends of 500 records, their bodies (about 300 KB of JSON each) made"
        " before the timing. Pull: every record from cursor 0, pages of 500, each page's JSON decoded by"
        " the client inside the timing (as a client must).",
        "- CPU time: user and system time of the server process, and of the PostgreSQL backends of the"
        " round's database, read from /proc before and after the batches and the pull; per batch and per"
        " page. Unlike the wall clock, it hardly changes with what else runs on the machine.",
        "- Import: in process, each size into a new account (key and account made untimed), one",
        "  revision per memory; the timing ends when the import's closing pull is done.",
        "- The machine is shared with other jobs (2 cores); figures are indicative, not a guarantee.",
    ]


def cpu_lines(args: argparse.Namespace, results: Results) -> list[str]:
    """The table of CPU time per batch and per page, and the load the rounds ran under."""
    lines = [
        "",
        "### CPU time per batch of 500 and per page of 500 pulled (medians of the rounds)",
        "",
        "| Database | Server | Batch: server, ms | Batch: PostgreSQL, ms | Page: server, ms "
        "| Page: PostgreSQL, ms | Load average (1 min) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for name, label, r in table_rows(args, results):
        if name == "PostgreSQL":
            database = (
                f"{r['batch_database_cpu_ms']:.1f} | {r['page_server_cpu_ms']:.1f} "
                f"| {r['page_database_cpu_ms']:.1f}"
            )
        else:
            database = f"(in the server) | {r['page_server_cpu_ms']:.1f} | (in the server)"
        lines.append(f"| {name} | {label} | {r['batch_server_cpu_ms']:.1f} | {database} | {r['load']:.1f} |")
    return lines


def table_rows(args: argparse.Namespace, results: Results) -> Iterator[tuple[str, str, dict[str, float]]]:
    """(database, which server, its figures) for each row of the report's tables."""
    for name, servers in results.items():
        for which, figures in servers.items():
            yield name, f"before ({args.baseline})" if which == "before" else "now", figures


def published_lines(results: Results) -> list[str]:
    """This run's batches and pulls against the figures first published (not side by side)."""
    lines = ["", "This run against the figures first published (2026-12-01, one round, not side by side):"]
    lines.append("")
    for name, servers in results.items():
        batches, pulls = PUBLISHED[name]
        now = servers["now"]
        lines.append(
            f"- {name}: batches {now['batch_rate']:,.0f} against {batches:,} records/s "
            f"({now['batch_rate'] / batches:.1f}x), pull {now['pull_rate']:,.0f} against {pulls:,} "
            f"({now['pull_rate'] / pulls:.1f}x)."
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--singles", type=int, default=300, help="timed single requests of each kind")
    parser.add_argument("--batches", type=int, default=20, help="batches of 500 records")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--import-sizes", type=sizes, default=[300, 3000], help="memories per import timed")
    parser.add_argument(
        "--before-sizes",
        type=sizes,
        default=[300],
        help="of those, the sizes imported one memory at a time too",
    )
    parser.add_argument("--rounds", type=int, default=5, help="rounds per server, medians taken")
    parser.add_argument(
        "--baseline",
        help="a commit whose server is measured too, side by side (request by request, same rounds)",
    )
    args = parser.parse_args()
    results, versions, imports, found = run(args)
    text = report(args, results, versions, imports, found)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
