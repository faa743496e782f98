"""How long `squirrel-mcp hook` takes, spawn to exit, beside a minimal Python process printing a constant.

On a vault of `--memories` memories (10,000: the recall corpus repeated, its vector file written
beforehand as scripts/bench_warmup.py writes it) with the embeddings plugin, in one run:

- `prompt` with the memory process warm (hybrid ranking ready): `--runs` hooks, each a real
  `squirrel-mcp hook prompt --host claude-code` with Claude Code's UserPromptSubmit JSON on its
  stdin and no passphrase (as a host runs it), the prompts taken in turn from the recall set's
  questions and from prompts no memory answers; interleaved with as many runs of the anchor,
  `python -c "print(...)"`, and of `pre-compact` (the hook's own start, no connection).
  Spawn to exit, median and p95.
- `session-start` with no memory process running (the hook starts it, with the passphrase as the
  keychain would give it), spawn to the hook's exit with its briefing printed; beside the first
  host's bridge start: `squirrel-mcp` spawned by `mcp.Client` with no process running, to its
  first `get_context` answered. `--starts` of each, alternated, the memory process ended
  (SIGTERM, its snapshot written) before each.

Writes the "## Latency" section of docs/benchmarks/hooks.md, between `<!-- latency -->` and
`<!-- /latency -->` (the file's other sections are other scripts'). `nox -s bench`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_hybrid
import bench_warmup
from doc_sections import write_section

from squirrel_mcp.core.channel import Channel, holder
from squirrel_mcp.core.config import Config
from squirrel_mcp.core.hello import identity
from squirrel_mcp_embeddings import embedder, hooks

REPO = Path(__file__).resolve().parent.parent
OUTPUT = REPO / "docs" / "benchmarks" / "hooks.md"
HOOK = str(Path(sys.executable).parent / "squirrel-mcp")
ANCHOR = [sys.executable, "-c", "print('squirrel')"]
# Prompts no memory of the corpus answers: coding requests, greetings, follow-ups.
UNANSWERED = [
    "Refactor this function to use a list comprehension",
    "hello!",
    "thanks, that fixed it",
    "Why does the build fail on the second run?",
    "Write a unit test for the parser",
]
PROMPT_MEDIAN, PROMPT_P95, START_RATIO = 150.0, 300.0, 1.2


def percentile(values: Sequence[float], share: float) -> float:
    """The `share` percentile of `values`, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(share * len(ordered)) - 1))]


class Bench:
    """The run's vault, channel and environments."""

    def __init__(self, scratch: Path, memories: int) -> None:
        self.vault = scratch / "vault.sqlite3"
        self.cache = scratch / "cache"
        runtime = Path(tempfile.mkdtemp(prefix="sq-bh-"))
        self.env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(scratch / "home"),
            "SQUIRREL_VAULT": str(self.vault),
            "SQUIRREL_MEMORY_CACHE_DIR": str(self.cache),
            "XDG_RUNTIME_DIR": str(runtime),
            "SQUIRREL_MCP_SHARED": "1",
            "SQUIRREL_MCP_SHARED_IDLE": "600",
            "SQUIRREL_PROJECT": "",
            # No keychain: the hooks are answered by the running process, as the same user.
            "PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring",
        }
        (scratch / "home").mkdir()
        model = embedder.load(threads=hooks.RUNTIME_THREADS)
        started = time.perf_counter()
        bench_warmup.seed(self.vault, memories, model, self.cache)
        print(
            f"setup: {memories:,} memories and their vectors in {time.perf_counter() - started:.0f} s",
            flush=True,
        )
        self.channel = Channel.of(identity(Config.from_env(self.env)), self.env)

    def with_passphrase(self) -> dict[str, str]:
        """The environment of a host's server config, or of a hook whose keychain holds the passphrase."""
        return {**self.env, "SQUIRREL_PASSPHRASE": bench_warmup.PASSPHRASE}

    def stop_process(self) -> None:
        """End the vault's memory process (SIGTERM: its snapshot written) and wait until it has gone."""
        pid = holder(self.channel.lock_path)
        if pid is None or not Path(f"/proc/{pid}").exists():
            return
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 120
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.02)

    def bridge(self) -> StdioServerParameters:
        return StdioServerParameters(command=HOOK, args=[], env=self.with_passphrase())


def run_hook(env: dict[str, str], event: str, given: dict[str, Any]) -> tuple[float, str]:
    """One hook, spawn to exit: its time in ms and its stdout."""
    data = json.dumps(given).encode("utf-8")
    began = time.perf_counter()
    done = subprocess.run(
        [HOOK, "hook", event, "--host", "claude-code"], input=data, env=env, capture_output=True, check=False
    )
    took = (time.perf_counter() - began) * 1000
    if done.returncode != 0 or done.stderr:
        raise SystemExit(f"the hook failed: {done.returncode} {done.stderr.decode(errors='replace')}")
    return took, done.stdout.decode("utf-8")


def run_anchor() -> float:
    began = time.perf_counter()
    subprocess.run(ANCHOR, capture_output=True, check=True)
    return (time.perf_counter() - began) * 1000


def claude(event: str, cwd: Path, **fields: str) -> dict[str, Any]:
    return {
        "session_id": "bench",
        "transcript_path": str(cwd / "t.jsonl"),
        "cwd": str(cwd),
        "hook_event_name": event,
        **fields,
    }


async def warm_up(bench: Bench, query: str) -> float:
    """A host's bridge starts the memory process and searches until the ranking is hybrid; seconds."""
    began = time.perf_counter()
    async with Client(bench.bridge()) as client:
        while time.perf_counter() - began < 900:
            found = (await client.call_tool("search_memory", {"query": query})).structured_content or {}
            if found.get("ranking") == "hybrid" and "note" not in found:
                break
            await anyio.sleep(0.5)
    return time.perf_counter() - began


async def bridge_start(bench: Bench) -> float:
    """The first host's bridge: spawn (no memory process running) to its first get_context answered, ms."""
    began = time.perf_counter()
    async with Client(bench.bridge()) as client:
        result = await client.call_tool("get_context", {})
        took = (time.perf_counter() - began) * 1000
        if result.is_error:
            raise SystemExit("get_context failed")
    return took


def prompts(queries: list[str], runs: int) -> list[str]:
    """`runs` prompts: the recall set's questions and unanswered prompts, alternately."""
    return [
        queries[i // 2 % len(queries)] if i % 2 == 0 else UNANSWERED[i // 2 % len(UNANSWERED)]
        for i in range(runs)
    ]


def measure(bench: Bench, queries: list[str], runs: int, starts: int) -> dict[str, Any]:
    home = Path(bench.env["HOME"])
    warm_s = anyio.run(warm_up, bench, queries[0])
    print(f"warm-up: hybrid ranking after {warm_s:.0f} s", flush=True)
    hook_env = {**bench.env, "SQUIRREL_HOOK_DEADLINE": "120"}
    prompt_ms, anchor_ms, compact_ms, printed = [], [], [], 0
    compacting = claude("PreCompact", home, trigger="auto")
    for index, prompt in enumerate(prompts(queries, runs)):
        given = claude("UserPromptSubmit", home, prompt=prompt)
        order = ("hook", "anchor", "compact") if index % 2 == 0 else ("compact", "anchor", "hook")
        for which in order:
            if which == "anchor":
                anchor_ms.append(run_anchor())
            elif which == "compact":
                compact_ms.append(run_hook(hook_env, "pre-compact", compacting)[0])
            else:
                took, out = run_hook(hook_env, "prompt", given)
                prompt_ms.append(took)
                printed += bool(out)
    print(f"prompt: median {statistics.median(prompt_ms):.0f} ms", flush=True)
    session_ms, bridge_ms = [], []
    starting = {**bench.with_passphrase(), "SQUIRREL_HOOK_DEADLINE": "120"}
    for index in range(starts):
        order = ("hook", "bridge") if index % 2 == 0 else ("bridge", "hook")
        for which in order:
            bench.stop_process()
            if which == "hook":
                took, out = run_hook(
                    starting, "session-start", claude("SessionStart", home, source="startup")
                )
                if not out:
                    raise SystemExit("session-start printed nothing")
                session_ms.append(took)
            else:
                bridge_ms.append(anyio.run(bridge_start, bench))
    bench.stop_process()
    return {
        "prompt": prompt_ms,
        "anchor": anchor_ms,
        "compact": compact_ms,
        "printed": printed,
        "session": session_ms,
        "bridge": bridge_ms,
        "warm_s": warm_s,
    }


def section(result: dict[str, Any], args: argparse.Namespace, command: str) -> str:
    prompt, anchor = result["prompt"], result["anchor"]
    session, bridge = statistics.median(result["session"]), statistics.median(result["bridge"])
    p_med, p95 = statistics.median(prompt), percentile(prompt, 0.95)
    ratio = session / bridge

    def met(ok: bool) -> str:
        return "yes" if ok else "**no**"

    load = os.getloadavg()[0]
    lines = [
        "## Latency",
        "",
        f"Written by `{command}` (`nox -s bench`), {datetime.now(UTC):%Y-%m-%d %H:%M} UTC: a vault of "
        f"{args.memories:,} memories (the recall corpus repeated, its vector file written beforehand) with "
        "the embeddings plugin, every figure beside its anchor from the same run. Spawn to exit of the real "
        "`squirrel-mcp hook ... --host claude-code`, Claude Code's JSON on its stdin, no passphrase in its "
        "environment (the running memory process answers it as the same user).",
        "",
        "| what | runs | median, ms | p95, ms | target | met |",
        "|---|---:|---:|---:|---|---|",
        f"| `prompt`, the memory process warm | {len(prompt)} | {p_med:,.0f} | {p95:,.0f} | "
        f"median <= {PROMPT_MEDIAN:g} ms, p95 <= {PROMPT_P95:g} ms | "
        f"{met(p_med <= PROMPT_MEDIAN and p95 <= PROMPT_P95)} |",
        f"| anchor: `python -c \"print('squirrel')\"` | {len(anchor)} | {statistics.median(anchor):,.0f} | "
        f"{percentile(anchor, 0.95):,.0f} | | |",
        f"| `pre-compact` (the hook's own start: no connection, no vault) | {len(result['compact'])} | "
        f"{statistics.median(result['compact']):,.0f} | {percentile(result['compact'], 0.95):,.0f} | | |",
        f"| `session-start`, no memory process running (the hook starts it) | {len(result['session'])} | "
        f"{session:,.0f} | {max(result['session']):,.0f} (max) | within {START_RATIO:g}x the bridge's | "
        f"{met(ratio <= START_RATIO)} ({ratio:.2f}x) |",
        f"| the first host's bridge: spawn to `get_context` answered (starts the memory process) | "
        f"{len(result['bridge'])} | {bridge:,.0f} | {max(result['bridge']):,.0f} (max) | | |",
        "",
        f"- `prompt` over the anchor: {p_med - statistics.median(anchor):+,.0f} ms at the median. The "
        "prompts alternate the recall set's questions and prompts no memory answers "
        f"({', '.join(repr(p) for p in UNANSWERED[:2])}, ...); {result['printed']} of {len(prompt)} "
        "printed a recall (the rest printed nothing, as "
        "the confidence rule of server/confidence.py decided). Hook and anchor runs are interleaved, "
        "their order swapped every run. `pre-compact`, run among them, is the part of a `prompt` hook's "
        "time that is its own start (the interpreter, the console script and the imports of "
        "`squirrel_mcp.cli.hook`); the rest is the round trip to the memory process and its search.",
        f"- The memory process was warm: a host's bridge had started it and searched until its ranking was "
        f"hybrid ({result['warm_s']:.0f} s), then left; it stays (an idle time) and each hook keeps it.",
        "- `session-start` cold and the bridge alternate, the memory process ended (SIGTERM, its snapshot "
        "written) before each; both start it the same way (the bridge's code), load the plugin and the "
        "vector file, unlock and open the vault from its snapshot. The vault's key derivation is the "
        "benchmark's cheap one (scrypt N=2**14), the same for both. With the default "
        "`SQUIRREL_HOOK_DEADLINE` of 2 s, a cold `session-start` slower than that prints nothing (one "
        "line on stderr) while the process it started goes on opening for the next prompts; the runs "
        "here set it to 120 s to time the answer.",
        "",
        f"Machine: Python {platform.python_version()}, {platform.platform()}, {os.cpu_count()} CPUs, load "
        f"average (1 min) {load:.2f} at the end (shared: compare within this run).",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=40, help="prompt hooks (and anchors)")
    parser.add_argument("--starts", type=int, default=5, help="cold session-start hooks (and bridge starts)")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    queries = [
        q["query"] for q in json.loads((bench_hybrid.RECALL / "queries.json").read_text(encoding="utf-8"))
    ]
    with tempfile.TemporaryDirectory(prefix="squirrel-bench-hooks-") as scratch:
        bench = Bench(Path(scratch), args.memories)
        try:
            result = measure(bench, queries, args.runs, args.starts)
        finally:
            bench.stop_process()
    command = "python scripts/bench_hooks.py" + "".join(
        f" {a}" for a in (argv if argv is not None else sys.argv[1:])
    )
    write_section(args.output, "latency", section(result, args, command))
    print(json.dumps({k: v for k, v in result.items() if k != "printed"}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
