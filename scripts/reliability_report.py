"""Write docs/reliability.md from the figures the reliability checks just recorded.

Reads build/reliability/*.json (one per check, written by tests/reliability/figures.py
`record`) and build/reliability/rss/soak.json (the soak's memory curve). Run by
`nox -s reliability` after the checks, which writes docs/reliability.md; after the test
suite's run of the checks the page goes to build/docs/reliability.md instead
(scripts/figure_pages.py). Every number in the page comes from those files.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import figure_pages

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "build" / "reliability"
SOAK = FIGURES / "rss" / "soak.json"
PAGE = ROOT / "docs" / "reliability.md"

# What each check of tests/reliability/test_crash.py, test_concurrency.py and test_soak.py
# does, for the page; the other checks' files describe themselves (docs/security.md too).
METHODS = {
    "crash-server": (
        "The real server (`python -m squirrel_mcp`) over stdio, driven by a minimal JSON-RPC "
        "client that owns the process: saves, corrections, deletes and restores until a SIGKILL "
        "at a random moment: 0-1 s after spawn in every fourth run (start-up takes ~1 s: the "
        "kill lands while the vault is being opened), 0-1 s after the handshake in the others "
        "(in the middle of calls). After each kill a fresh "
        "connection runs SQLite's integrity check, a fresh unlock must hold every acknowledged "
        "revision with the text the answer showed, and the next run restarts the server on the "
        "same vault. At the end every stored record must decrypt."
    ),
    "crash-server-shared": (
        "As crash-server, with the host's `squirrel-mcp` a bridge to the vault's memory process "
        "(the default): the SIGKILL is the memory process's, 0-1 s after spawn in every fourth "
        "run (it lands while the process starts or unlocks) or after the handshake. The call in "
        "flight must be answered by the bridge with an error saying it may or may not have been "
        "done; the host then leaves and the bridge ends (0) once the process it reconnected to "
        "has closed the vault. The same checks after each kill."
    ),
    "crash-store": (
        "A worker process (tests/reliability/crash_worker.py) imports everything once and forks "
        "a child per run; the child unlocks the vault with the real MemoryStore on LocalVault and "
        "saves, corrects, deletes and restores in a loop, printing each write that returned; the "
        "test SIGKILLs it 0-80 ms after it is ready (a run costs a fork, not a 1 s server start). "
        "After each kill: integrity check, every acknowledged revision present with its text; "
        "after every 40 runs (then a fresh vault), a fresh unlock holds them all and every "
        "stored record decrypts."
    ),
    "crash-vectors": (
        "A forked child saves memories and has the embeddings plugin's `Hybrid` (a stand-in "
        "embedder of 384 dims: the file, not the model, is under test) embed them through "
        "`rank` and write the vector file, by its saver thread and by `flush`; SIGKILL 0-300 ms "
        "after it is ready. After each kill the file must open as the plugin opens it (no "
        "VectorFileError: old or new, never torn), every row must be exactly the vector of the "
        "memory revision it names, and it must hold no fewer rows than the last write that "
        "returned. A fresh vault every 10 runs keeps the file a few MB."
    ),
    "crash-plugin": (
        "The real server with the real embeddings plugin and model (as installed by nox), on a "
        "vault of 200 memories: once searches rank hybrid, it saves a memory and searches in a "
        "loop (each search embeds the new memory, then the plugin's saver thread rewrites the "
        "vector file) until a SIGKILL 0-2 s later. After each kill: every acknowledged save is "
        "in the vault, the vector file opens with the running model's stamp, every row names a "
        "current memory revision, and 20 sampled rows equal the model's own vectors of those "
        "memories. Few runs (each loads the model); the forked crash-vectors check is the one "
        "that lands kills mid-write in numbers."
    ),
    "crash-passphrase": (
        "`squirrel-mcp passphrase` SIGKILLed at a random moment of its run (uniform over its "
        "duration, measured on a run left alone every 20; a third aimed at the last 20 %, where "
        "the key is swapped), changing back and forth between two passphrases: forked by a worker "
        "(tests/reliability/passphrase_worker.py, keys at the cheapest scrypt cost) on a local "
        "vault and against the reference sync server on SQLite, and a few runs of the installed "
        "command at the default cost. After every run the account's key must open under exactly "
        "one of the two passphrases, and that one must read every memory with its text. Runs "
        "count every run, faults the kills that landed while the command ran."
    ),
    "concurrency": (
        "Two real servers over stdio on one vault, each with its own mcp client, side by side: "
        "500 writes each (a save, or a correction of a memory either saved; half of the "
        "corrections aim at the first five memories so the two collide), each followed by a "
        "read of the other's latest acknowledged write (get_memory, or search for the keyword "
        "only that memory carries). Runs = acknowledged writes. Then: every acknowledged "
        "revision present, each memory's revisions 1..n without gap, and no stored record "
        "that nobody was told about."
    ),
    "soak": (
        "10,000 memories seeded through the real MemoryStore in the test process, then the real "
        "server over stdio with 2,000 mixed calls through the mcp client (search 40%, "
        "get_memory 15%, list_memories 11%, get_context 1%, save 16%, correct 10%, "
        "delete/restore 7%). Every call must succeed; the server's RSS is read from "
        "/proc/<pid>/status before the first call and after every 100; it must grow less than "
        "10% from call 500 to call 2,000. Then 500 more calls that only read (search, get, list, "
        "get_context), which add no data: RSS must grow less than 2 MiB over them."
    ),
}

FINDINGS = """\
## What the checks found

- **Temp files left by killed writers.** `atomic_write` (files.py) writes a temp file beside
  the target, then renames it. A kill between the two left the temp file (sealed vectors,
  mode 0600) behind for good (the crash-vectors notes count this run's). Fixed:
  `atomic_write` now removes the temp files of its target that are older than 10 minutes
  (younger ones may belong to a second server writing the same file). The crash-vectors
  check ages the leftovers and asserts the next write removes them all.
- **A damaged vault could end in a traceback.** SQLite notices a damaged page only when a
  query reaches it, after the file opened; LocalVault turned errors at the open into
  StorageError but not later ones (the tampering check truncated a vault and `export`
  printed a traceback from `changes_since`). Fixed: every LocalVault method now turns
  SQLite's errors (not programming errors) into StorageError, one line naming the vault.
- **A killed client's key change can land after it died.** Against the sync server, a
  `squirrel-mcp passphrase` killed after its request left may still have its new key
  stored a moment later, after a check that saw the old one. Right (the server either
  stores it or not, and exactly one passphrase works at every moment), and the next run
  on that machine says the passphrase was changed; the crash-passphrase notes count
  such runs.
- **get_context is slow on a large vault** (not fixed here: server.py). With 10,000
  memories one call takes {get_context} (the soak's latency table): it converts every
  profile, preference and other memory to its public view (`Revision.memory()`, a Pydantic
  dump and re-validation) and only then keeps the first 50 / `recent`. Slicing before
  converting would make it proportional to what it returns.

## Limits of these checks

- kill -9 ends the process, not the machine: what reached the kernel survives it. These
  runs test that every write is atomic and that an acknowledgement is only sent after the
  commit; they do not test fsync against power loss (`synchronous=FULL` and the
  fsyncs of `atomic_write` are there for that, untested here).
- The crash-store and crash-vectors children are forked from a worker that imported the
  code once; the process killed runs the same code as the server, minus MCP.
- The vector-file check uses a stand-in embedder; the file format, sealing and writing
  are the plugin's own.
"""


def load_checks() -> list[dict[str, object]]:
    """Every check's figures, in file-name order."""
    return [json.loads(path.read_text(encoding="utf-8")) for path in sorted(FIGURES.glob("*.json"))]


def table(checks: list[dict[str, object]]) -> list[str]:
    """The measured table, one row per check."""
    lines = [
        "| check | runs | faults injected | inputs tried | data lost | seconds | notes |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for c in checks:
        notes = str(c["notes"]).replace("|", "\\|")
        lines.append(
            f"| {c['check']} | {c['runs']} | {c['faults_injected']} | {c['inputs_tried']} "
            f"| {c['data_lost']} | {c['seconds']} | {notes} |"
        )
    return lines


def soak_section() -> list[str]:
    """The RSS curve and per-tool latency of the soak, if it ran."""
    if not SOAK.exists():
        return [
            "## Soak: resident memory",
            "",
            "The soak did not run (no build/reliability/rss/soak.json).",
            "",
        ]
    soak = json.loads(SOAK.read_text(encoding="utf-8"))
    lines = [
        "## Soak: resident memory of the server",
        "",
        f"{soak['memories']:,} memories (seeded in {soak['seeding_seconds']} s), "
        f"{soak['calls']:,} calls over stdio. RSS = VmRSS of the server process. "
        f"Growth from call {soak['warm_up']} to call {soak['calls'] - soak['read_tail']:,}: "
        f"{soak['growth_after_warm_up']:+.1%} (the calls add memories and revisions, which the "
        f"server keeps decrypted in memory); over the last {soak['read_tail']} calls, which only "
        f"read: {soak['read_tail_growth_kib'] / 1024:+.1f} MiB.",
        "",
        "| calls | RSS (MiB) | seconds |",
        "|---:|---:|---:|",
    ]
    lines += [
        f"| {point['calls']} | {point['rss_kib'] / 1024:.1f} | {point['seconds']} |"
        for point in soak["curve"]
    ]
    lines += ["", "| tool | calls | mean latency (ms) |", "|---|---:|---:|"]
    lines += [
        f"| {tool} | {count} | {soak['mean_ms_by_tool'][tool]} |"
        for tool, count in soak["calls_by_tool"].items()
    ]
    return [*lines, ""]


def get_context_latency() -> str:
    """The soak's mean get_context latency, as words for the findings."""
    if SOAK.exists():
        mean = json.loads(SOAK.read_text(encoding="utf-8"))["mean_ms_by_tool"].get("get_context")
        if mean is not None:
            return f"{mean / 1000:.2f} s on average in this run"
    return "about 0.6 s (measured earlier; the soak did not time it in this run)"


def verdict(checks: list[dict[str, object]]) -> str:
    """The last bullet of the findings: what this run's figures say, in one line."""
    failed = [f"{c['check']} ({c['data_lost']})" for c in checks if c["data_lost"] != 0]
    if failed:
        return "- **This run found problems:** data lost or wrong in " + ", ".join(failed) + "."
    return (
        "- In this run no check lost anything: every acknowledged write was there after every kill, "
        "every vault opened, no half-written record or vector file was visible, and the two servers "
        "never stored one revision twice."
    )


def commit() -> str:
    """The checkout's commit, to say what was measured."""
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> int:
    checks = load_checks()
    known = [c for c in checks if c["check"] in METHODS]
    lines = [
        "# Reliability: faults, bad input, tampering, concurrency",
        "",
        "Written by `scripts/reliability_report.py` from the figures of the last `nox -s reliability`",
        "(`nox -s tests` runs the same checks and writes build/docs/reliability.md); do not edit by hand. "
        "Measured "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC at commit {commit()} on {os.cpu_count()} cores, "
        f"Python {platform.python_version()}.",
        "",
        "Data lost counts anything a check found wrong: an acknowledged write missing or changed, "
        "a record or file that does not open, a read that missed a write it had to see.",
        "",
        *table(checks),
        "",
        "## What each check does",
        "",
    ]
    for c in known:
        lines += [f"**{c['check']}.** {METHODS[str(c['check'])]}", ""]
    others = [str(c["check"]) for c in checks if c["check"] not in METHODS]
    if others:
        lines += [
            f"The other checks ({', '.join(others)}) say what they did in their notes; "
            "docs/security.md covers fuzzing, tampering, secrecy and the network.",
            "",
        ]
    lines += soak_section()
    findings = FINDINGS.replace("{get_context}", get_context_latency())
    lines.append(findings.replace("\n\n## Limits", "\n" + verdict(checks) + "\n\n## Limits", 1))
    figure_pages.write_page(PAGE, ROOT, "\n".join(lines))
    print(f"{len(checks)} checks")
    return 0 if checks else 1


if __name__ == "__main__":
    sys.exit(main())
