"""Retrieval on LongMemEval: words only (the base) and hybrid (the plugin), through the real server.

LongMemEval (Wu et al., "LongMemEval: Benchmarking Chat Assistants on Long-Term
Interactive Memory", ICLR 2025) gives each question its own haystack of about 48 chat
sessions (about 500 turns). The questions are read at run time from a directory (the
one given with --data, else SQUIRREL_LONGMEMEVAL_DATA, else ../shared/data/longmemeval
beside the repository), one JSON file per question; none of it is kept in the repository.

For each question: a new vault (`squirrel-mcp init`); every turn saved as one memory
through the server's save_memory over stdio (entity = the role, text = the turn's
first 4,000 characters, a control character as a space); the question searched once
with limit 10, first by a server with no plugin (words only), then by a server with the
embeddings plugin once it has embedded every turn (hybrid). The measures, each at 5 and 10 (`scores`): session
recall_any, recall_all and frac, and turn hit. The report goes to
docs/benchmarks/longmemeval.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench_stdio import Item, init_vault, save_items, server_rankings, write_section

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("SQUIRREL_LONGMEMEVAL_DATA") or ROOT.parent / "shared" / "data" / "longmemeval")
REPORT = ROOT / "docs" / "benchmarks" / "longmemeval.md"
# What save_memory keeps of a turn: the server refuses a longer text.
MAX_TEXT = 4000
# The control characters save_memory refuses in a text (a few turns hold one): saved as spaces.
CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
TYPES = (
    "single-session-user",
    "single-session-assistant",
    "single-session-preference",
    "multi-session",
    "knowledge-update",
    "temporal-reasoning",
)
MEASURES = tuple(f"{name}@{k}" for name in ("recall_any", "recall_all", "frac", "turn hit") for k in (5, 10))
WORDS, HYBRID = "words only (the base)", "hybrid (the plugin)"


@dataclass(frozen=True)
class Question:
    """One question and its haystack: each turn keyed "session:turn", the session's id beside it."""

    question_id: str
    question_type: str
    text: str
    turns: list[Item]
    session_of: dict[str, str]
    answer_sessions: frozenset[str]
    answer_turns: frozenset[str]


def question_files(data: Path | None = None) -> list[Path]:
    """The question files in `data` (default: DATA), by name; none when it is missing."""
    data = DATA if data is None else data
    if not data.is_dir():
        return []
    return sorted(data.glob("*.json"))


def load(path: Path) -> Question:
    """One question file: its haystack's turns in order, which sessions and turns hold the answer."""
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or "haystack_sessions" not in data:
        raise ValueError(f"{path.name} is not a LongMemEval question (a JSON object with haystack_sessions)")
    turns: list[Item] = []
    session_of: dict[str, str] = {}
    answer_turns = set()
    sessions = zip(data["haystack_session_ids"], data["haystack_sessions"], strict=True)
    for s, (session_id, session) in enumerate(sessions):
        for t, turn in enumerate(session):
            text = CONTROL.sub(" ", str(turn["content"])[:MAX_TEXT])
            if not text.strip():
                continue
            key = f"{s}:{t}"
            turns.append(Item(key, str(turn["role"]), text))
            session_of[key] = str(session_id)
            if turn.get("has_answer"):
                answer_turns.add(key)
    return Question(
        str(data["question_id"]),
        str(data["question_type"]),
        str(data["question"]),
        turns,
        session_of,
        frozenset(str(s) for s in data["answer_session_ids"]),
        frozenset(answer_turns),
    )


def scores(ranked: Sequence[frozenset[str]], question: Question) -> dict[str, float]:
    """The measures of one search; `ranked` holds each result's turn keys, best first.

    - recall_any@k: a turn of an answer session is among the first k results;
    - recall_all@k: every answer session has a turn among them;
    - frac@k: the share of answer sessions with a turn among them;
    - turn hit@k: a turn marked has_answer is among them.
    """
    found: dict[str, float] = {}
    wanted = question.answer_sessions
    for k in (5, 10):
        keys = frozenset().union(*ranked[:k])
        sessions = {question.session_of[key] for key in keys} & wanted
        found[f"recall_any@{k}"] = float(bool(sessions))
        found[f"recall_all@{k}"] = float(sessions == wanted)
        found[f"frac@{k}"] = len(sessions) / len(wanted) if wanted else 0.0
        found[f"turn hit@{k}"] = float(bool(keys & question.answer_turns))
    return found


def mean_scores(rows: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Each measure averaged over questions (0 for none)."""
    return {m: statistics.fmean(row[m] for row in rows) if rows else 0.0 for m in MEASURES}


def run_question(question: Question, scratch: Path, *, keep: bool = False) -> dict[str, Any]:
    """Both rankings' scores and latencies for one question, in its own vault (kept when `keep`).

    A vault kept by an earlier run is searched again as it is (its turns saved, its vector
    file there), so a run stopped half-way goes on where it was.
    """
    import anyio

    vault, cache = scratch / f"{question.question_id}.sqlite3", scratch / f"{question.question_id}.cache"
    kept = scratch / f"{question.question_id}.held.json"
    started = time.monotonic()
    reused = keep and kept.is_file()
    if reused:
        held = {memory_id: set(keys) for memory_id, keys in json.loads(kept.read_text()).items()}
    else:
        # A run stopped while saving this question left a part of its vault: it starts again.
        remove_question(scratch, question)
        init_vault(vault, cache)
        held = anyio.run(save_items, vault, cache, question.turns)
    saved = time.monotonic() - started
    result: dict[str, Any] = {"type": question.question_type, "scores": {}, "seconds": {}}
    result["kept before"] = reused
    for name, plugins in ((WORDS, False), (HYBRID, True)):
        began = time.monotonic()

        async def searched(plugins: bool = plugins) -> Any:
            return await server_rankings(vault, cache, [question.text], plugins=plugins, probe=True)

        (ids,), (seconds,) = anyio.run(searched)
        ranked = [frozenset(held.get(memory_id, ())) for memory_id in ids]
        result["scores"][name] = scores(ranked, question)
        result["seconds"][name] = seconds
        result.setdefault("server", {})[name] = time.monotonic() - began
    if keep:
        kept.write_text(
            json.dumps({memory_id: sorted(keys) for memory_id, keys in held.items()}), encoding="utf-8"
        )
    else:
        # ~500 turns and their vectors a question: freed as soon as it is scored.
        remove_question(scratch, question)
    print(
        f"{question.question_id} ({question.question_type}): {len(question.turns)} turns saved in "
        f"{saved:.0f} s, warm in {result['server'][HYBRID]:.0f} s; "
        + ", ".join(
            f"{name} recall_all@5 {row['recall_all@5']:.0f} turn hit@5 {row['turn hit@5']:.0f}"
            for name, row in result["scores"].items()
        ),
        flush=True,
    )
    return result


def remove_question(scratch: Path, question: Question) -> None:
    """Every file of `question`'s vault in `scratch`: the vault, its journal, its vectors, the map."""
    for path in scratch.glob(f"{question.question_id}.*"):
        shutil.rmtree(path) if path.is_dir() else path.unlink()


def pick(questions: Sequence[Question], count: int | None) -> list[Question]:
    """`count` questions stratified by type (each type's first, in file order), or all of them.

    Each type gets its share of `count` in proportion to its questions (the largest
    remainders take what rounding down leaves), so a quick run weighs the types as the
    whole set does, not the first few files.
    """
    if count is None or count >= len(questions):
        return list(questions)
    by_type = {kind: [q for q in questions if q.question_type == kind] for kind in TYPES}
    shares = {kind: count * len(group) / len(questions) for kind, group in by_type.items()}
    taken = {kind: int(share) for kind, share in shares.items()}
    for kind in sorted(shares, key=lambda kind: taken[kind] - shares[kind])[: count - sum(taken.values())]:
        taken[kind] += 1
    return [q for kind in TYPES for q in by_type[kind][: taken[kind]]]


# Published figures on LongMemEval_s: (system, what one retrieved item is, measure as named
# here, figure, how it was published).
PEERS = (
    ("mcp-memory-service", "a turn (all-MiniLM-L6-v2)", "frac@5", 0.804, '"R@5 80.4%"'),
    ("mcp-memory-service", "a turn (all-MiniLM-L6-v2)", "frac@10", 0.904, '"R@10 90.4%"'),
    ("mcp-memory-service", "a session (all-MiniLM-L6-v2)", "frac@5", 0.860, '"86.0%"'),
    ("MemPalace", "a session's user turns", "recall_any@5", 0.966, '"R@5 96.6%"'),
    ("MemPalace", "a session's user turns", "recall_all@5", 0.870, "rescored with the official scorer"),
    ("plain BM25 (a third party's run)", "a session", "recall_any@5", 0.938, '"about 93.8%"'),
)


def beside_peers(overall: Mapping[str, Mapping[str, float]]) -> list[str]:
    """Each published figure beside ours of the same measure (ours: one memory per turn)."""
    lines = [
        "| published by | one retrieved item | measure | published | as published "
        f"| ours, {WORDS} | ours, {HYBRID} |",
        "|---|---|---|---:|---|---:|---:|",
    ]
    for system, unit, measure, figure, published in PEERS:
        lines.append(
            f"| {system} | {unit} | {measure} | {figure:.3f} | {published} "
            f"| {overall[WORDS][measure]:.3f} | {overall[HYBRID][measure]:.3f} |"
        )
    return lines


def table(rows: Mapping[str, Mapping[str, float]], latency: Mapping[str, float]) -> list[str]:
    """One row per ranking: every measure, and the median search when given."""
    lines = [
        "| ranking | " + " | ".join(MEASURES) + " | median search |",
        "|---|" + "---:|" * (len(MEASURES) + 1),
    ]
    for name, figures in rows.items():
        ms = f"{latency[name] * 1000:.1f} ms" if name in latency else "-"
        lines.append(f"| {name} | " + " | ".join(f"{figures[m]:.3f}" for m in MEASURES) + f" | {ms} |")
    return lines


def kept_lines(results: Sequence[Mapping[str, Any]]) -> list[str]:
    """What the section says of the vaults an earlier run kept (none: nothing)."""
    earlier = sum(1 for r in results if r.get("kept before"))
    if not earlier:
        return []
    return [
        f"The vaults of {earlier} of them were saved through the server (and their turns embedded) by",
        "earlier runs with `--keep`; this run searched each anew through the server, words only and hybrid,",
        "the plugin reading the vector file (re-embedding what an older vector file lacks, as any",
        "upgrade does).",
    ]


def render(label: str, results: Sequence[Mapping[str, Any]], command: str) -> str:
    """The section of one run: overall, then per type."""
    names = (WORDS, HYBRID)
    latency = {name: statistics.median(r["seconds"][name] for r in results) for name in names}
    overall = {name: mean_scores([r["scores"][name] for r in results]) for name in names}
    lines = [
        f"## {label}",
        "",
        f"Measured {datetime.now(UTC):%Y-%m-%d} on {platform.machine()}, Python {platform.python_version()},",
        f"with `{command}`: {len(results)} questions, one search each per ranking.",
        *kept_lines(results),
        "",
        *table(overall, latency),
        "",
        "Beside the published figures (each the publisher's own, over all 470 questions, on its own",
        "unit; ours: one memory per turn, the questions of this run):",
        "",
        *beside_peers(overall),
        "",
    ]
    for kind in TYPES:
        chosen = [r for r in results if r["type"] == kind]
        if chosen:
            lines += [f"{kind}, {len(chosen)} questions:", ""]
            lines += [*table({n: mean_scores([r["scores"][n] for r in chosen]) for n in names}, {}), ""]
    return "\n".join(lines)


HEADER = "\n".join(
    [
        "# Retrieval on LongMemEval",
        "",
        "Written by scripts/bench_longmemeval.py (`nox -s bench`, or",
        "`python scripts/bench_longmemeval.py --data DIR [--questions N]`).",
        "",
        '**Data.** LongMemEval (Wu et al., "LongMemEval: Benchmarking Chat Assistants on Long-Term',
        'Interactive Memory", ICLR 2025; code and data under the MIT licence, xiaowu0162/LongMemEval),',
        "its cleaned `_s` split: each question over its own haystack of about 48 chat sessions (about",
        "500 turns), with the sessions and the turns that hold the answer marked. The questions measured",
        "here are 119 of its 470 answerable ones (a stratified quarter; the abstention questions are left",
        "out, as the official scorer does), read at run time from a directory outside this repository;",
        "none of the data is kept here.",
        "",
        "**Method.** Per question, a new vault; every turn of its haystack saved as one memory through",
        "the server's save_memory over stdio (entity = the role, text = the turn's first 4,000",
        "characters, a control character, which save_memory refuses, as a space; a blank turn left",
        "out); the question searched once with limit 10 through search_memory: words only = the",
        "server with no plugin; hybrid = the server with squirrel-mcp-embeddings, once it has embedded",
        "every turn. Identical turns of one role are one memory, so a result stands for every turn it",
        "holds. The measures, each over the first k results:",
        "",
        "- session `recall_any@k`: a turn of an answer session is among them;",
        "- session `recall_all@k`: every answer session has a turn among them (the official scorer's);",
        "- session `frac@k`: the share of answer sessions with a turn among them;",
        "- turn `hit@k` (`turn hit@k` below): a turn marked as holding the evidence is among them.",
        "",
        "Median search: the search_memory round trip as the client sees it.",
        "",
        "**Published figures, named by these measures.** Each run's section sets them beside ours.",
        "Each is the publisher's own, on its own unit of retrieval and over all 470 questions; only a",
        "figure of the same measure and unit (one memory per turn) is like for like with ours. A",
        "session-level document holds every turn of its session, so the first 5 documents cover 5",
        "sessions where our first 5 results may come from one or two.",
        "",
    ]
)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the questions, print the section and write it to the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data", type=Path, default=DATA, help="the directory of LongMemEval's question files"
    )
    parser.add_argument("--questions", type=int, help="run only this many questions, stratified by type")
    parser.add_argument("--only", help="question ids to run, separated by commas")
    parser.add_argument("--label", default="Current build", help="the report's heading for this run")
    parser.add_argument("--report", type=Path, default=REPORT, help="where to write the report")
    parser.add_argument(
        "--keep",
        type=Path,
        help="keep each question's vault, vectors and memory-to-turn map in this directory",
    )
    args = parser.parse_args(argv)
    files = question_files(args.data)
    if not files:
        print(f"bench_longmemeval: no LongMemEval questions in {args.data}; skipped", flush=True)
        return 0
    if args.only:
        files = [path for path in files if path.stem in args.only.split(",")]
    questions = pick([load(path) for path in files], args.questions)
    command = "python scripts/bench_longmemeval.py" + (
        f" --questions {args.questions}" if args.questions else ""
    )
    if args.keep:
        command += " --keep DIR"
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        results = [run_question(question, args.keep, keep=True) for question in questions]
    else:
        with tempfile.TemporaryDirectory(prefix="squirrel-longmemeval-") as scratch:
            results = [run_question(question, Path(scratch)) for question in questions]
    section = render(args.label, results, command)
    write_section(args.report, HEADER, section, args.label)
    print(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
