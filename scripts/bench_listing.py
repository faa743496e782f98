"""list_memories and get_context at 100,000 memories: the catalog's page against a sort per call.

What is measured, in process (no MCP round trip): the tool functions
`squirrel_mcp.server.tools.list_memories` and `get_context`, called on a real store (a
local SQLite vault, cheap key derivation: unlocking is not measured), filled by
`import_export` with the seeded synthetic memories of scripts/bench_search.py
(timestamps over two years, seven categories, 300 entities, Zipf-distributed tags).
Each call includes the pull that every tool call makes (`refresh_if_stale`).

"Before" is what these tools did until the catalog (squirrel_mcp/book/catalog.py): every
current revision sorted by (updatedAt, id) on each call, then filtered and sliced;
it is replayed on the same store, in the same process, with the same arguments, and
its answers are checked to be the tools' own. The two alternate, call by call.
Median and p90 (nearest rank) per case; the report goes to docs/benchmarks/listing.md.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import math
import platform
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from bench_search import Corpus

from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.book.transfer import ExportedMemory, ExportFile, import_export
from squirrel_mcp.core.models import HALF_LIFE_DAYS, Revision
from squirrel_mcp.keys import crypto
from squirrel_mcp.plugins.manager import PluginHost, get_plugin_manager
from squirrel_mcp.server import tools
from squirrel_mcp.server.opening import Opening
from squirrel_mcp.storage.local import LocalVault

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = REPO / "docs" / "benchmarks" / "listing.md"
T = TypeVar("T")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line: vault size, timed calls per case, output file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--memories", type=int, default=100_000, help="memories in the vault (default: 100000)"
    )
    parser.add_argument("--runs", type=int, default=30, help="timed calls per case and side (default: 30)")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    return parser.parse_args(argv)


def before_list(store: MemoryStore, arguments: dict[str, object]) -> tuple[list[str], int]:
    """list_memories as it was: sort every current revision per call, filter, slice."""
    store.refresh_if_stale()
    include = bool(arguments.get("includeDeleted", False))
    ordered = sorted(store.current(include_deleted=include), key=lambda r: (r.updatedAt, r.id), reverse=True)
    category, entity = arguments.get("category"), arguments.get("entity")
    tags = [str(tag).casefold() for tag in arguments.get("tags", [])]  # type: ignore[attr-defined]

    def wanted(memory: Revision) -> bool:
        held = {tag.casefold() for tag in memory.tags}
        return (
            (category is None or memory.category == category)
            and all(tag in held for tag in tags)
            and (entity is None or memory.entity.casefold() == str(entity).casefold())
        )

    matching = [memory for memory in ordered if wanted(memory)]
    offset, limit = int(arguments.get("offset", 0)), int(arguments.get("limit", 20))  # type: ignore[call-overload]
    return [memory.id for memory in matching[offset : offset + limit]], len(matching)


def before_context(store: MemoryStore, recent: int) -> tuple[list[str], int, dict[str, int]]:
    """get_context as it was: sort every live revision per call, take the first of each kind, count."""
    store.refresh_if_stale()
    memories = sorted(store.current(), key=lambda r: (r.updatedAt, r.id), reverse=True)

    def first(count: int, wanted: Callable[[Revision], bool]) -> list[str]:
        return [memory.id for memory in itertools.islice(filter(wanted, memories), count)]

    counts = Counter[str](m.category for m in memories)
    ids = first(50, lambda m: m.category == "profile") + first(50, lambda m: m.category == "preference")
    ids += first(recent, lambda m: m.category not in ("profile", "preference"))
    return ids, len(memories), {category: counts[category] for category in HALF_LIFE_DAYS}


def fill(store: MemoryStore, count: int) -> list[Revision]:
    """Import `count` synthetic memories (one revision each) into `store`."""
    corpus = Corpus(seed=11)
    memories = [corpus.memory(number) for number in range(count)]
    parsed = ExportFile(
        format="squirrel-mcp-export",
        version=1,
        exportedAt="2026-11-30T00:00:00.000Z",
        exportedBy="bench",
        memories=[ExportedMemory(id=memory.id, revisions=[memory]) for memory in memories],
    )
    import_export(store, parsed)
    return memories


def timed(call: Callable[[], T]) -> tuple[float, T]:
    """Milliseconds the call took, and its answer."""
    started = time.perf_counter()
    answer = call()
    return (time.perf_counter() - started) * 1000, answer


def listed(context: tools.ToolContext, arguments: dict[str, object]) -> tuple[list[str], int]:
    """list_memories' answer as ids and total."""
    result = tools.list_memories(context, **arguments)  # type: ignore[arg-type]
    return [memory.id for memory in result.memories], result.total


def contextual(context: tools.ToolContext) -> tuple[list[str], int, dict[str, int]]:
    """get_context's answer as the ids of its lists, its total and counts."""
    result = tools.get_context(context)
    ids = [memory.id for memory in [*result.profile, *result.preferences, *result.recent]]
    return ids, result.total, result.counts


def nearest_rank(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def main(argv: Sequence[str] | None = None) -> int:
    """Fill a vault, time each case both ways, write the report."""
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-listing-") as temp:
        cheap = crypto.KdfParams(salt=b"s" * crypto.SALT_BYTES, n=2**14)
        store = MemoryStore.create(LocalVault(Path(temp) / "vault.sqlite3", create=True), "bench", kdf=cheap)
        started = time.perf_counter()
        memories = fill(store, args.memories)
        print(
            f"setup: imported {len(memories):,} memories in {time.perf_counter() - started:.0f} s", flush=True
        )
        context = tools.ToolContext(Opening(store), PluginHost(get_plugin_manager()))
        tag = Counter(tag for memory in memories for tag in memory.tags).most_common(40)[-1][0]
        entity = memories[0].entity
        cases: list[tuple[str, dict[str, object]]] = [
            ("list_memories, first page of 20", {}),
            ("list_memories, page 100 of 20 (offset 2,000)", {"offset": 2000}),
            ("list_memories, category note", {"category": "note"}),
            ("list_memories, one entity", {"entity": entity}),
            ("list_memories, a tag held by few", {"tags": [tag]}),
            ("list_memories, deleted included, 100", {"includeDeleted": True, "limit": 100}),
        ]
        rows = []
        for name, arguments in cases:
            now_ms, before_ms = [], []
            for _ in range(args.runs):
                spent, answer = timed(functools.partial(listed, context, arguments))
                now_ms.append(spent)
                spent, old = timed(functools.partial(before_list, store, arguments))
                before_ms.append(spent)
                if answer != old:
                    raise SystemExit(f"{name}: the catalog's answer differs from the sort's")
            rows.append((name, now_ms, before_ms))
        now_ms, before_ms = [], []
        for _ in range(args.runs):
            spent, got = timed(lambda: contextual(context))
            now_ms.append(spent)
            spent, sorted_answer = timed(lambda: before_context(store, 10))
            before_ms.append(spent)
            if got != sorted_answer:
                raise SystemExit("get_context: the catalog's answer differs from the sort's")
        rows.append(("get_context (recent 10)", now_ms, before_ms))
    report = render(rows, args)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(report, encoding="utf-8")
    print(report)
    return 0


def render(rows: list[tuple[str, list[float], list[float]]], args: argparse.Namespace) -> str:
    """The markdown report."""
    lines = [
        "# Listing at scale",
        "",
        f"`list_memories` and `get_context` on a vault of {args.memories:,} memories, in process",
        "(the tool functions of `squirrel_mcp.server.tools`, without the MCP round trip), each call",
        "including its pull. *Now*: the catalog keeps the current revisions in order, so a call",
        "costs about its page. *Before*: every current revision sorted per call, then filtered",
        "(what the tools did before the catalog), replayed on the same store in the same run;",
        "its answers were checked to equal the tools'. Generated by `scripts/bench_listing.py`.",
        "",
        "| Call | Now median (p90), ms | Before median (p90), ms | Before / now |",
        "|---|---:|---:|---:|",
    ]
    for name, now_ms, before_ms in rows:
        now, before = statistics.median(now_ms), statistics.median(before_ms)
        lines.append(
            f"| {name} | {now:.2f} ({nearest_rank(now_ms, 0.9):.2f}) "
            f"| {before:.1f} ({nearest_rank(before_ms, 0.9):.1f}) | {before / now:,.0f}x |"
        )
    lines += [
        "",
        "Target: at most 5 ms at 100,000 memories.",
        "",
        "## How it was measured",
        "",
        f"- {args.runs} timed calls per case and side, alternating now and before;",
        "  median and p90 (nearest rank).",
        "- Memories: the seeded synthetic corpus of `scripts/bench_search.py` (one revision each,",
        f"  saved over two years, categories {', '.join(sorted(HALF_LIFE_DAYS))}),",
        "  imported with `import_export`.",
        "- The tag case uses the 40th most common tag; the entity case the entity of the first memory.",
        "",
        "## Environment",
        "",
        f"- Date: {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- Python {platform.python_version()} on {platform.platform()}",
        "- A shared 2-core machine; compare the two columns of one run rather than runs with each other.",
        "",
        "## Reproduce",
        "",
        "```",
        "python scripts/bench_listing.py                 # 100,000 memories, writes this file",
        "python scripts/bench_listing.py --memories 10000 --runs 50",
        "```",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
