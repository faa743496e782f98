"""Start-up time of squirrel-mcp against a minimal MCPServer, measured side by side.

What is measured: the wall-clock time from just before the server process is spawned
to the moment the client's first `list_tools()` returns. That covers the interpreter
start, the imports, whatever the server does before serving (for squirrel-mcp:
unlocking the vault, i.e. scrypt with N=2**17, and decrypting every record), the MCP
handshake the `mcp.Client` performs, and one `tools/list` round trip. Shutting the
server down afterwards is not timed.

Three servers are started, each as `sys.executable` over stdio through `mcp.Client`:

- squirrel-mcp on an existing, empty vault (`python -m squirrel_mcp`);
- squirrel-mcp on a vault holding `--memories` memories (saved through the real
  server over stdio before any timing);
- a minimal `MCPServer` with one tool, written to a temporary file at run time.

How: the vaults are created and filled first (untimed), then each server is started
`--warmup` times untimed, then `--runs` rounds follow. Every round starts each server
once, interleaved, with the order rotated by one each round, so that the load of a
shared, noisy machine falls on all of them alike. The report gives the median, min and
p90 per server and the ratio of each median to the minimal server's median, and is
written to docs/benchmarks/startup.md (run it with `nox -s bench`).
"""

from __future__ import annotations

import argparse
import gc
import importlib.metadata
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = REPO / "docs" / "benchmarks" / "startup.md"
PASSPHRASE = "benchmark passphrase, not a secret"

MINIMAL_SERVER = '''\
"""A minimal MCP server: one tool, stdio."""

from mcp.server.mcpserver import MCPServer

server = MCPServer("minimal")


@server.tool()
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


server.run("stdio")
'''

# Words for the seeded memories: varied enough that the duplicate check on save and
# the search index see realistic text rather than one sentence repeated.
VOCABULARY = (
    "prefers tea coffee morning evening meeting project deadline sister brother garden bicycle "
    "train Berlin Lisbon allergy peanuts vegetarian running marathon piano guitar novel library "
    "dentist appointment birthday October March laptop keyboard server backup password manager "
    "holiday mountains beach cat dog recipe lentils curry invoice tax office colleague Anna Tom "
    "Python Rust database migration review release weekly standup budget flight hotel"
)
WORDS = VOCABULARY.split()
CATEGORIES = ("profile", "preference", "fact", "project", "note", "event", "task")


@dataclass
class Variant:
    """One server to start: how, and the start-up times measured for it (seconds)."""

    name: str
    params: StdioServerParameters
    expected_tools: int | None = None
    times: list[float] = field(default_factory=list)
    tools: int = 0
    protocol: str = ""


@dataclass(frozen=True)
class Summary:
    """The figures reported for one variant, in milliseconds."""

    median: float
    minimum: float
    p90: float


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line: runs, warm-up starts, memories in the full vault, output file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="timed starts per server (default: 20)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed starts per server first (default: 1)")
    parser.add_argument(
        "--memories", type=int, default=500, help="memories in the second squirrel-mcp vault (default: 500)"
    )
    parser.add_argument(
        "--output", type=Path, default=DEFAULT_OUTPUT, help="markdown file to write (default: %(default)s)"
    )
    args = parser.parse_args(argv)
    if args.runs < 1 or args.warmup < 0 or args.memories < 1:
        parser.error("--runs and --memories must be at least 1, --warmup at least 0")
    return args


def squirrel_params(vault: Path) -> StdioServerParameters:
    """Start the installed squirrel-mcp on `vault`, the way an MCP client config does."""
    env = {"SQUIRREL_VAULT": str(vault), "SQUIRREL_PASSPHRASE": PASSPHRASE}
    return StdioServerParameters(command=sys.executable, args=["-m", "squirrel_mcp"], env=env)


def create_vault(vault: Path) -> None:
    """Create an empty vault non-interactively with `squirrel-mcp init` (untimed setup)."""
    env = {
        "PATH": os.environ.get("PATH", ""),
        "SQUIRREL_VAULT": str(vault),
        "SQUIRREL_PASSPHRASE": PASSPHRASE,
    }
    if "HOME" in os.environ:
        env["HOME"] = os.environ["HOME"]
    subprocess.run(
        [sys.executable, "-m", "squirrel_mcp", "init"],
        env=env,
        capture_output=True,
        check=True,
        timeout=120,
    )


def memory_arguments(rng: random.Random, index: int) -> dict[str, object]:
    """The save_memory arguments of the index-th seeded memory (deterministic for a given rng)."""
    text = " ".join(rng.choices(WORDS, k=rng.randint(8, 24)))
    return {
        "text": f"Memory {index}: {text}.",
        "entity": rng.choice(("user", "Anna (sister)", "Tom (colleague)", "home network", "project Falcon")),
        "category": CATEGORIES[index % len(CATEGORIES)],
        "tags": rng.sample(WORDS, k=2),
        "keywords": rng.sample(WORDS, k=3),
    }


async def fill_vault(params: StdioServerParameters, count: int) -> None:
    """Save `count` memories through the real server over stdio (this also creates the vault)."""
    rng = random.Random(17)  # sample text, not a secret
    async with Client(params) as client:
        for index in range(count):
            result = await client.call_tool("save_memory", memory_arguments(rng, index))
            if result.is_error:
                raise RuntimeError(f"save_memory failed while filling the vault: {result.content}")


async def start_once(variant: Variant) -> float:
    """Spawn the server, connect, list its tools; the seconds from spawn to the tools/list answer."""
    client = Client(variant.params)
    gc.collect()
    started = time.perf_counter()
    async with client:
        listing = await client.list_tools()
        elapsed = time.perf_counter() - started
        variant.tools = len(listing.tools)
        variant.protocol = client.protocol_version
    if variant.expected_tools is not None and variant.tools != variant.expected_tools:
        raise RuntimeError(f"{variant.name}: listed {variant.tools} tools, expected {variant.expected_tools}")
    return elapsed


async def measure(variants: list[Variant], runs: int, warmup: int) -> None:
    """Warm up, then run `runs` interleaved rounds, rotating the order each round."""
    for _ in range(warmup):
        for variant in variants:
            await start_once(variant)
    for round_number in range(runs):
        shift = round_number % len(variants)
        for variant in variants[shift:] + variants[:shift]:
            variant.times.append(await start_once(variant))
        line = "  ".join(f"{v.name}: {v.times[-1] * 1000:7.1f} ms" for v in variants)
        print(f"round {round_number + 1:3d}/{runs}  {line}", flush=True)


def summarize(times: list[float]) -> Summary:
    """Median, min and p90 (nearest rank) of `times`, in milliseconds."""
    ordered = sorted(t * 1000 for t in times)
    rank = math.ceil(0.9 * len(ordered))
    return Summary(median=statistics.median(ordered), minimum=ordered[0], p90=ordered[rank - 1])


def scrypt_reference(repeats: int = 5) -> float:
    """Median milliseconds of squirrel-mcp's key derivation alone (scrypt, default parameters), in-process."""
    from squirrel_mcp import crypto

    samples = []
    for _ in range(repeats):
        params = crypto.KdfParams.new()
        started = time.perf_counter()
        crypto.derive_kek(PASSPHRASE, params)
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def environment(args: argparse.Namespace, load_before: str, load_after: str) -> list[tuple[str, str]]:
    """What the figures depend on besides the code: interpreter, packages, machine, date."""
    try:
        usable = str(len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        usable = "n/a"
    plugins = sorted(entry.name for entry in importlib.metadata.entry_points(group="squirrel_mcp"))
    return [
        ("Date (UTC)", datetime.now(UTC).strftime("%Y-%m-%d %H:%M")),
        ("Python", f"{platform.python_version()} ({platform.python_implementation()})"),
        ("mcp", importlib.metadata.version("mcp")),
        ("squirrel-mcp", importlib.metadata.version("squirrel-mcp")),
        # Installed plugins load at every start (their startup hooks run in the background).
        ("Plugins installed (entry points squirrel_mcp)", ", ".join(plugins) or "none"),
        ("Platform", platform.platform()),
        ("CPUs (os.cpu_count / usable)", f"{os.cpu_count()} / {usable}"),
        ("Load average before / after (1 min)", f"{load_before} / {load_after}"),
        ("Runs per server (+ untimed warm-up)", f"{args.runs} (+ {args.warmup})"),
    ]


def load_average() -> str:
    """The 1-minute load average, or n/a where the platform has none."""
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except (AttributeError, OSError):
        return "n/a"


def render(variants: list[Variant], baseline: Variant, env: list[tuple[str, str]], scrypt_ms: float) -> str:
    """The markdown report."""
    base = summarize(baseline.times)
    lines = [
        "# Start-up time",
        "",
        "Time from just before the server process is spawned to the first `tools/list` answer,",
        "for squirrel-mcp and for a minimal `MCPServer` with one tool, both started with the same",
        "Python over stdio through `mcp.Client`. The client's handshake is part of the time for",
        "both; shutting the server down is not. Generated by `scripts/bench_startup.py`.",
        "",
        "## Results",
        "",
        "| Server | Tools | Median (ms) | Min (ms) | p90 (ms) | Median vs minimal |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for variant in variants:
        s = summarize(variant.times)
        if variant is baseline:
            versus = "1.00x"
        else:
            versus = f"{s.median / base.median:.2f}x (+{s.median - base.median:.0f} ms)"
        figures = f"{s.median:.0f} | {s.minimum:.0f} | {s.p90:.0f}"
        lines.append(f"| {variant.name} | {variant.tools} | {figures} | {versus} |")
    protocols = sorted({v.protocol for v in variants})
    lines += [
        "",
        f"For reference, squirrel-mcp's key derivation alone (scrypt, N=2\\*\\*17, r=8, p=1) took a median "
        f"of {scrypt_ms:.0f} ms in the benchmark process; every squirrel-mcp start pays it once to unlock "
        "the vault.",
        "",
        "## How it was measured",
        "",
        "- The vaults are created before any timing: the empty one with `squirrel-mcp init`, the",
        "  full one by saving the memories through the real server over stdio. The timed starts",
        "  therefore unlock an existing vault and decrypt every record in it, as a normal start does.",
        "- Each server is started once untimed per warm-up round (byte-code caches, page cache).",
        "- Then every round starts each server once, interleaved, the order rotated by one each",
        "  round, so that load from other processes on the shared machine falls on all alike.",
        "- Median, min and p90 (nearest rank) over the timed runs; the ratio is of the medians.",
        f"- Negotiated protocol version: {', '.join(protocols)}.",
        "",
        "## Environment",
        "",
        "| | |",
        "|---|---|",
        *(f"| {key} | {value} |" for key, value in env),
        "",
        "## Reproduce",
        "",
        "```",
        "nox -s bench                   # 20 runs per server, writes this file",
        "nox -s bench -- --runs 50      # more runs; --memories N sets the full vault's size",
        "python scripts/bench_startup.py --runs 20   # the same, in any venv with squirrel-mcp installed",
        "```",
        "",
        "The machine the figures come from is shared and noisy; compare medians from one run",
        "of the script with each other rather than with figures from another run or machine.",
        "",
        "<details><summary>Every timed run (ms, in order)</summary>",
        "",
        *(f"- {v.name}: {', '.join(f'{t * 1000:.0f}' for t in v.times)}" for v in variants),
        "",
        "</details>",
        "",
    ]
    return "\n".join(lines)


async def run(args: argparse.Namespace) -> None:
    """Set up the vaults and the minimal server, measure, print and write the report."""
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        workdir = Path(tmp)
        empty_vault, full_vault = workdir / "empty.sqlite3", workdir / "full.sqlite3"
        minimal = workdir / "minimal_server.py"
        minimal.write_text(MINIMAL_SERVER, encoding="utf-8")

        print(f"setup: creating an empty vault and one with {args.memories} memories ...", flush=True)
        create_vault(empty_vault)
        setup_started = time.perf_counter()
        await fill_vault(squirrel_params(full_vault), args.memories)
        print(
            f"setup: saved {args.memories} memories in {time.perf_counter() - setup_started:.1f} s",
            flush=True,
        )

        baseline = Variant(
            "minimal MCPServer",
            StdioServerParameters(command=sys.executable, args=[str(minimal)]),
            expected_tools=1,
        )
        variants = [
            Variant("squirrel-mcp, empty vault", squirrel_params(empty_vault)),
            Variant(f"squirrel-mcp, {args.memories} memories", squirrel_params(full_vault)),
            baseline,
        ]
        load_before = load_average()
        await measure(variants, args.runs, args.warmup)
        load_after = load_average()

    scrypt_ms = scrypt_reference()
    report = render(variants, baseline, environment(args, load_before, load_after), scrypt_ms)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(report, encoding="utf-8")

    base = summarize(baseline.times)
    print()
    for variant in variants:
        s = summarize(variant.times)
        print(
            f"{variant.name:32s} median {s.median:7.1f} ms  min {s.minimum:7.1f}  p90 {s.p90:7.1f}"
            f"  ratio {s.median / base.median:.2f}"
        )
    print(f"scrypt alone (in-process)        median {scrypt_ms:7.1f} ms")
    print(f"\nwrote {args.output}")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: `python scripts/bench_startup.py [--runs N]`."""
    anyio.run(run, parse_args(argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
