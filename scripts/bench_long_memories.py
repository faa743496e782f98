"""Long memories read whole: what passages gain and what they cost, through the real server.

A memory longer than the model's window (256 tokens) is also embedded as overlapping
passages (squirrel_mcp_embeddings.warmup.PASSAGE_TOKENS, PASSAGE_OVERLAP), and its cosine
to a query is the best of its passages' and its whole text's. This measures, side by side
in one run, this installation and (with --baseline PYTHON) another one's server, e.g. the
build before passages:

- **Gain**: the long-memory set (tests/data/long_memories.json, tests/long_memories.py):
  each fact placed first, in the middle or last of its long memory, or saved as a memory
  of its own beside the long memory without it. One vault per placing, holding the recall
  corpus's 500 memories (tests/recall/) and the set's 15 long memories; each question
  (no word in common with its memory) is searched once with limit 5 by a server with
  the plugin, after it has embedded every memory. found@5: the share of questions whose
  memory (the long one, or the fact's own) is among the 5 results.
- **Cost**: on the recall corpus and on the turns of the first --lme-questions questions
  of LongMemEval (read at run time from --lme-data, every turn one memory, entity the role,
  text its first 4,000 characters), the warm-up's time (from the server's first answer by
  meaning to its first answer without the warm-up's note, polled every POLL seconds) and
  the size of the vector file it wrote, the median over --rounds rounds; each round
  starts the servers of both builds in turn, on the same vault.

Writes docs/benchmarks/long-memories.md.

    python scripts/bench_long_memories.py [--baseline PYTHON] [--rounds 3] [--lme-questions 2]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the sets: tests/long_memories.py, tests/recall/corpus.py

from squirrel_mcp.book.memories import MemoryStore  # noqa: E402
from squirrel_mcp.keys import crypto  # noqa: E402
from squirrel_mcp.storage.local import LocalVault  # noqa: E402
from squirrel_mcp_embeddings import embedder, passages, warmup  # noqa: E402
from tests.long_memories import POSITIONS, LongMemory  # noqa: E402
from tests.long_memories import load as load_set  # noqa: E402
from tests.recall.corpus import CORPUS, revision  # noqa: E402

REPORT = ROOT / "docs" / "benchmarks" / "long-memories.md"
# As scripts/bench_longmemeval.py reads it: SQUIRREL_LONGMEMEVAL_DATA, else ../shared/data/longmemeval.
LME_DATA = Path(
    os.environ.get("SQUIRREL_LONGMEMEVAL_DATA") or ROOT.parent / "shared" / "data" / "longmemeval"
)
PASSPHRASE = "benchmark passphrase, not a secret"
TOP = 5
# LongMemEval's usual cut of a turn (its README): the first 4,000 characters.
TURN_CHARACTERS = 4_000
POLL = 0.1
WARM_TIMEOUT = 3600.0
WARMING = "Search by meaning is warming up"
PLACINGS = ("own", *POSITIONS)

# (entity, text) of one memory to save.
Memory = tuple[str, str]


@dataclass(frozen=True)
class Corpus:
    """A vault's content for the cost measure: the recall corpus, or memories saved one by one."""

    recall_corpus: bool
    memories: list[Memory]

    def recipes(self) -> list[tuple[str, str]]:
        """Each memory's text and the recipe the plugin embeds it from."""
        if self.recall_corpus:
            return [(memory["text"], warmup.recipe(revision(memory))) for memory in CORPUS]
        return [(text, f"{entity}: {text}") for entity, text in self.memories]


@dataclass
class Served:
    """What one server run gave: each query's result ids, the warm-up's seconds, the vector file's bytes."""

    ranked: list[list[str]]
    warm_seconds: float
    file_bytes: int


def server_env(vault: Path, cache: Path) -> dict[str, str]:
    """A server of its own (no memory process) on `vault`, the plugin on, its vectors in `cache`."""
    env = {key: value for key, value in os.environ.items() if key in ("PATH", "LANG")}
    home = cache / "home"
    env.update(
        SQUIRREL_VAULT=str(vault),
        SQUIRREL_PASSPHRASE=PASSPHRASE,
        SQUIRREL_MEMORY_CACHE_DIR=str(cache),
        SQUIRREL_MCP_PLUGINS="embeddings",
        SQUIRREL_MCP_SHARED="0",
        SQUIRREL_PROJECT="",
        HOME=str(home),
        XDG_DATA_HOME=str(home / "data"),
        XDG_CACHE_HOME=str(home / "cache"),
    )
    return env


def seed(vault: Path, memories: Sequence[Memory], with_corpus: bool) -> list[str]:
    """A new vault holding the recall corpus (if asked) then `memories`; the ids of `memories`."""
    store = MemoryStore.create(
        LocalVault(vault, create=True),
        PASSPHRASE,
        crypto.KdfParams(salt=os.urandom(crypto.SALT_BYTES), n=2**14),
    )
    try:
        if with_corpus:
            for memory in CORPUS:
                store.import_history([revision(memory)])
        return [
            store.save(entity=entity, text=text, category="note", tags=[], keywords=[]).id
            for entity, text in memories
        ]
    finally:
        store._log.storage.close()


async def serve(python: str, vault: Path, cache: Path, queries: Sequence[str]) -> Served:
    """Start the server of `python` on `vault`, time its warm-up, search each query (limit TOP), stop it."""
    import anyio
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(command=python, args=["-m", "squirrel_mcp"], env=server_env(vault, cache))
    async with Client(params) as client:
        began = time.monotonic()
        ready = None
        while True:
            result = await client.call_tool("search_memory", {"query": "warm", "limit": 1})
            found = result.structured_content or {}
            if result.is_error:
                raise SystemExit("bench_long_memories: a search failed")
            now = time.monotonic()
            if found.get("ranking") == "hybrid":
                ready = now if ready is None else ready
                if WARMING not in found.get("note", ""):
                    break
            if now - began > WARM_TIMEOUT:
                raise SystemExit("bench_long_memories: the plugin did not finish embedding in time")
            await anyio.sleep(POLL)
        warm = time.monotonic() - ready
        ranked = []
        for query in queries:
            result = await client.call_tool("search_memory", {"query": query, "limit": TOP})
            found = result.structured_content or {}
            if result.is_error or found.get("ranking") != "hybrid":
                raise SystemExit("bench_long_memories: a hybrid search failed or fell back")
            ranked.append([hit["id"] for hit in found["results"]])
    (path,) = (cache / "squirrel-notes").glob("memory-vectors-*.bin")
    return Served(ranked, warm, path.stat().st_size)


def placed(memories: Sequence[LongMemory], placing: str) -> tuple[list[Memory], list[int]]:
    """The set's memories for one placing, and which of them each question looks for."""
    if placing == "own":
        saved = [(m.entity, m.text(None)) for m in memories] + [(m.entity, m.fact) for m in memories]
        return saved, list(range(len(memories), 2 * len(memories)))
    return [(m.entity, m.text(placing)) for m in memories], list(range(len(memories)))


def gain(builds: dict[str, str], scratch: Path) -> dict[str, dict[str, list[bool]]]:
    """Per build and placing, whether each question found its memory in the first TOP."""
    import anyio

    memories = load_set()
    questions = [m.question for m in memories]
    found: dict[str, dict[str, list[bool]]] = {build: {} for build in builds}
    for placing in PLACINGS:
        saved, targets = placed(memories, placing)
        vault = scratch / f"set-{placing}.sqlite3"
        ids = seed(vault, saved, with_corpus=True)
        for build, python in builds.items():
            cache = scratch / f"set-{placing}-{build}"
            served = anyio.run(serve, python, vault, cache, questions)
            found[build][placing] = [
                ids[target] in ranked for target, ranked in zip(targets, served.ranked, strict=True)
            ]
            print(f"{build} {placing}: {sum(found[build][placing])} of {len(questions)}", file=sys.stderr)
    return found


def lme_turns(data: Path, questions: int) -> list[Memory]:
    """Every turn of the first `questions` LongMemEval questions (by file name), as memories."""
    files = sorted(data.glob("*.json"))[:questions]
    turns = []
    for path in files:
        for session in json.loads(path.read_text(encoding="utf-8"))["haystack_sessions"]:
            turns += [
                (turn["role"], turn["content"][:TURN_CHARACTERS]) for turn in session if turn["content"]
            ]
    return turns


def passages_of(model: embedder.Embedder, corpus: Corpus) -> tuple[int, int]:
    """How many of `corpus`' memories are longer than the window, and their passages in all."""
    counts = [
        len(passages.passages(text, model.token_offsets(text)))
        for text, whole in corpus.recipes()
        if not model.fits(whole)
    ]
    return len(counts), sum(counts)


def cost(
    builds: dict[str, str], corpora: dict[str, Corpus], rounds: int, scratch: Path
) -> dict[str, dict[str, list[Served]]]:
    """Per corpus and build, each round's warm-up and vector file."""
    import anyio

    runs: dict[str, dict[str, list[Served]]] = {name: {build: [] for build in builds} for name in corpora}
    for number, (name, corpus) in enumerate(corpora.items()):
        vault = scratch / f"cost-{number}.sqlite3"
        seed(vault, corpus.memories, with_corpus=corpus.recall_corpus)
        for round_number in range(rounds):
            for build, python in builds.items():
                cache = scratch / f"cost-{number}-{build}-{round_number}"
                runs[name][build].append(anyio.run(serve, python, vault, cache, []))
                served = runs[name][build][-1]
                print(
                    f"{name}, {build}, round {round_number + 1}: warm-up {served.warm_seconds:.1f} s, "
                    f"file {served.file_bytes:,} bytes",
                    file=sys.stderr,
                )
    return runs


def report(
    builds: dict[str, str],
    found: dict[str, dict[str, list[bool]]],
    corpora: dict[str, Corpus],
    extra: dict[str, tuple[int, int]],
    runs: dict[str, dict[str, list[Served]]],
    args: argparse.Namespace,
) -> str:
    """docs/benchmarks/long-memories.md."""
    count = len(load_set())
    command = "python scripts/bench_long_memories.py" + (" --baseline PYTHON" if args.baseline else "")
    command += f" --rounds {args.rounds} --lme-questions {args.lme_questions}"
    lines = [
        "# Long memories read whole",
        "",
        f"Written by `{command}` (run by `nox -s bench`), on {platform.machine()} with",
        f"{os.cpu_count()} cores, while other work ran on the machine. Passages: a long memory's",
        f"sentences (passages.py; a sentence under {passages.SHORTEST} tokens joins the next, one",
        f"over {passages.PASSAGE_TOKENS} is cut in windows sharing {passages.PASSAGE_OVERLAP}), each with",
        "its entity.",
        "`before` is the server of the build given with --baseline (whole texts only, cut at the",
        "model's 256 tokens); `now` is this installation's.",
        "",
        "## Gain: a fact inside a long memory, found by meaning",
        "",
        f"{count} long memories of 1,500 to 4,000 characters (tests/data/long_memories.json), each",
        "holding one fact asked about by a question that shares no word with the memory. One vault",
        f"per placing: the recall corpus's {len(CORPUS)} memories and the {count} long memories (for",
        "`own`, the long memories without their fact, and each fact as a memory of its own). Every",
        f"question searched once, limit {TOP}, through the real server with the plugin, once warm.",
        f"found@{TOP}: the share of questions whose memory is among the results.",
        "",
        "| build | own memory | first | middle | last |",
        "|---|---:|---:|---:|---:|",
    ]
    for build in builds:
        shares = [statistics.fmean(found[build][placing]) for placing in PLACINGS]
        lines.append(f"| {build} | " + " | ".join(f"{share:.3f}" for share in shares) + " |")
    own = statistics.fmean(found["now"]["own"])
    gap = max(own - statistics.fmean(found["now"][placing]) for placing in POSITIONS)
    lines += [
        "",
        "Target: within 10 points of the own-memory rate at every placing. Now: "
        + (
            f"at most {gap * 100:.1f} points under it"
            if gap > 0
            else f"at least {-gap * 100:.1f} points above it"
        )
        + f" ({'met' if gap <= 0.1 + 1e-9 else 'NOT met'}).",
    ]
    lines += [
        "",
        "## Cost: the warm-up and the vector file",
        "",
        "The warm-up: from the server's first answer by meaning (the model loaded) to its first",
        f"answer without the warm-up's note, polled every {POLL} s; the median of the rounds run (up",
        f"to {args.rounds}), the builds taking turns in each round on the same vault. The file: the",
        "vector file the server left. Long: memories longer than the model's window; rows: the",
        "vectors embedded, one per memory plus the passages.",
        "",
        "| corpus | memories | long | build | rows | rounds | warm-up (s) | vector file (bytes) |",
        "|---|---:|---:|---|---:|---:|---:|---:|",
    ]
    medians: dict[tuple[str, str], tuple[int, float, float]] = {}
    for name, corpus in corpora.items():
        memories, (long, added) = len(corpus.recipes()), extra[name]
        for build in builds:
            rows = memories + (added if build == "now" else 0)
            warm = statistics.median(run.warm_seconds for run in runs[name][build])
            size = statistics.median(run.file_bytes for run in runs[name][build])
            medians[name, build] = rows, warm, size
            done = len(runs[name][build])
            lines.append(
                f"| {name} | {memories} | {long} | {build} | {rows} | {done} | {warm:.1f} | {size:,.0f} |"
            )
    if "before" in builds:
        lines += [
            "",
            "Growth, now against before (the target: the warm-up grows no more than the rows), and the",
            "vector file of a vault of 100,000 memories like each corpus (its size per memory, now):",
            "",
            "| corpus | rows | warm-up | vector file | 100,000 memories |",
            "|---|---:|---:|---:|---:|",
        ]
        for name, corpus in corpora.items():
            (rows, warm, size), (old_rows, old_warm, old_size) = medians[name, "now"], medians[name, "before"]
            scaled = size / len(corpus.recipes()) * 100_000 / 1e6
            lines.append(
                f"| {name} | ×{rows / old_rows:.2f} | ×{warm / old_warm:.2f} | ×{size / old_size:.2f} | "
                f"{scaled:,.0f} MB |"
            )
    lines.append("")
    return "\n".join(lines)


# The section scripts/choose_passages.py writes; a run of this script keeps it.
SWEEP_HEADING = "## How passages were chosen"


def write(path: Path, text: str, section: str | None) -> None:
    """Write the report: `text` with the sweep's `section` (None: the one the file holds, if any)."""
    if section is None and path.exists():
        kept = path.read_text(encoding="utf-8")
        section = kept[kept.index(SWEEP_HEADING) :] if SWEEP_HEADING in kept else None
    if not text and path.exists():
        text = path.read_text(encoding="utf-8")
    if SWEEP_HEADING in text:
        text = text[: text.index(SWEEP_HEADING)]
    path.write_text(text.rstrip("\n") + "\n" + (f"\n{section}" if section else ""), encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--baseline", metavar="PYTHON", help="also run the server of another installation")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the cost measure (default 3)")
    parser.add_argument(
        "--lme-questions", type=int, default=2, help="LongMemEval questions whose turns are saved"
    )
    parser.add_argument("--lme-data", type=Path, default=LME_DATA, help="LongMemEval's question files")
    parser.add_argument("--output", type=Path, default=REPORT)
    args = parser.parse_args(argv)
    builds = {"before": args.baseline} if args.baseline else {}
    builds["now"] = sys.executable
    corpora = {"recall corpus": Corpus(True, [])}
    if args.lme_data.is_dir() and args.lme_questions > 0:
        turns = lme_turns(args.lme_data, args.lme_questions)
        corpora[f"LongMemEval, {args.lme_questions} questions' turns"] = Corpus(False, turns)
    else:
        print(f"bench_long_memories: no LongMemEval data in {args.lme_data}; skipped", file=sys.stderr)
    model = embedder.load(threads=1)
    extra = {name: passages_of(model, corpus) for name, corpus in corpora.items()}
    with tempfile.TemporaryDirectory(prefix="squirrel-long-") as scratch:
        found = gain(builds, Path(scratch))
        runs = cost(builds, corpora, args.rounds, Path(scratch))
    text = report(builds, found, corpora, extra, runs, args)
    write(args.output, text, None)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
