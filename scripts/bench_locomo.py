"""Retrieval on LoCoMo: words only (the base) and hybrid (the plugin), through the real server.

LoCoMo (Maharana et al., "Evaluating Very Long-Term Conversational Memory of LLM
Agents", ACL 2024) holds long conversations between two people, with questions
whose evidence turns are annotated. The data is read at run time from a directory
(the one given, else SQUIRREL_LOCOMO_DATA, else ../shared/data/locomo beside the
repository); none
of it is kept in the repository.

For each conversation: a new vault (`squirrel-mcp init`); every turn saved as one
memory through the server's save_memory over stdio (entity = the speaker, text =
the turn, a shared photo as " [photo: <caption>]"); every question of categories
1-4 searched with limit 10, first by a server with no plugin (words only), then by
a server with the embeddings plugin once it has embedded every turn (hybrid). Two
offline rows from the same vault, in this process, give context: BM25 alone (the
base's word ranking called directly) and cosine alone (the plugin's model, every
turn ranked by its cosine to the question).

hit@k: an evidence turn is among the first k results; recall@k: the share of the
question's evidence turns among them; MRR: 1 / the rank of the first evidence turn
in the 10 results (0 when none is there). Identical turns of one speaker are one
memory (a save of the same memory writes nothing), so a result stands for every
turn it holds. Latency: the median of the searches' round trips as the client sees
them. The report goes to docs/benchmarks/locomo.md under a heading (--label);
sections under other headings are kept, so a before and an after can stand side by
side.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench_stdio import LIMIT, PASSPHRASE, Item, init_vault, save_items, server_rankings, write_section

ROOT = Path(__file__).resolve().parent.parent
# Where the conversations are read from unless a directory is given: SQUIRREL_LOCOMO_DATA, or
# ../shared/data/locomo beside the repository.
DATA = Path(os.environ.get("SQUIRREL_LOCOMO_DATA") or ROOT.parent / "shared" / "data" / "locomo")
REPORT = ROOT / "docs" / "benchmarks" / "locomo.md"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
METRICS = ("hit@1", "hit@5", "hit@10", "recall@5", "recall@10", "MRR")
TITLE = "# Retrieval on LoCoMo"
# The audit's corrected evidence lives beside the conversations; it is not one of them.
CORRECTIONS = "corrections.json"


@dataclass(frozen=True)
class Turn:
    dia_id: str
    speaker: str
    text: str


@dataclass(frozen=True)
class Question:
    """A question of categories 1-4; `corrected`: the audit's evidence when it differs from the key's."""

    text: str
    category: int
    evidence: frozenset[str]
    corrected: frozenset[str] | None = None

    def key(self, which: str) -> frozenset[str]:
        """The evidence by one key: "original" (LoCoMo's) or "corrected" (the audit's where it has one)."""
        return self.corrected if which == "corrected" and self.corrected is not None else self.evidence


@dataclass(frozen=True)
class Conversation:
    name: str
    turns: list[Turn]
    questions: list[Question]


def turn_text(turn: Mapping[str, Any]) -> str:
    """A turn as it is saved: its text, and a shared photo as " [photo: <caption>]"."""
    text = str(turn["text"])
    caption = turn.get("blip_caption")
    return f"{text} [photo: {caption}]" if caption else text


def evidence_ids(evidence: Iterable[str]) -> frozenset[str]:
    """The dia_ids of a question's evidence; a few entries hold two ("D8:6; D9:17")."""
    return frozenset(part for entry in evidence for part in re.split(r"[;,\s]+", entry) if part)


def conversation_files(data: Path = DATA) -> list[Path]:
    """LoCoMo's conversation files in `data` (the corrections file left out), none when it is missing."""
    if not data.is_dir():
        return []
    return sorted(path for path in data.glob("*.json") if path.name != CORRECTIONS)


def corrections(data: Path) -> dict[tuple[str, str], frozenset[str]]:
    """The audit's evidence by (conversation, question text), from `data`/corrections.json if there."""
    path = data / CORRECTIONS
    if not path.is_file():
        return {}
    found = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(found, list):
        raise ValueError(f"{path.name} is not a list of corrections")
    return {
        (str(entry["conversation"]), str(entry["question"])): evidence_ids(entry["correct_evidence"])
        for entry in found
    }


def load(path: Path) -> Conversation:
    """One conversation file: its turns in order and its questions of categories 1-4.

    A question the corrections beside it (corrections.json) cite, matched by its text,
    carries the audit's evidence as well as the key's.
    """
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path.name} is not a LoCoMo conversation (a JSON object with sessions and qa)")
    sessions = sorted(
        (int(key.split("_")[1]), value)
        for key, value in data.items()
        if re.fullmatch(r"session_\d+", key) and isinstance(value, list)
    )
    turns = [
        Turn(str(turn["dia_id"]), str(turn["speaker"]), turn_text(turn))
        for _, session in sessions
        for turn in session
    ]
    fixed = corrections(path.parent)
    questions = [
        Question(
            str(qa["question"]),
            int(qa["category"]),
            evidence_ids(qa["evidence"]),
            fixed.get((path.stem, str(qa["question"]))),
        )
        for qa in data["qa"]
        if qa["category"] in CATEGORIES
    ]
    return Conversation(path.stem, turns, questions)


def question_scores(ranked: Sequence[frozenset[str]], evidence: frozenset[str]) -> dict[str, float]:
    """hit@k, recall@k and reciprocal rank of one question; `ranked` holds each result's dia_ids."""
    scores: dict[str, float] = {}
    for k in (1, 5, 10):
        found = evidence & frozenset().union(*ranked[:k])
        scores[f"hit@{k}"] = float(bool(found))
        if k > 1:
            scores[f"recall@{k}"] = len(found) / len(evidence) if evidence else 0.0
    first = next((rank for rank, ids in enumerate(ranked[:LIMIT], 1) if ids & evidence), None)
    scores["MRR"] = 1.0 / first if first else 0.0
    return scores


def mean_scores(rows: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Each metric averaged over questions (0 for none)."""
    return {metric: statistics.fmean(row[metric] for row in rows) if rows else 0.0 for metric in METRICS}


# Offline rows, from the same vault -----------------------------------------------------------


def offline_rankings(vault: Path, queries: Sequence[str]) -> tuple[list[list[str]], list[list[str]]]:
    """BM25 alone and cosine alone: each query's first 10 memory ids."""
    import numpy as np

    from squirrel_mcp.book.memories import MemoryStore
    from squirrel_mcp.search import bm25
    from squirrel_mcp.storage.local import LocalVault
    from squirrel_mcp_embeddings import embedder
    from squirrel_mcp_embeddings.warmup import recipe

    storage = LocalVault(vault, create=False)
    try:
        store = MemoryStore.unlock(storage, PASSPHRASE)
        memories = store.current()
        now = datetime.now(UTC)
        words = [
            [hit.memory.id for hit in bm25.search(store.index, q, now, limit=LIMIT).hits] for q in queries
        ]
        store.close()
    finally:
        storage.close()
    model = embedder.load()
    rows = model.embed([recipe(memory) for memory in memories])
    asked = model.embed(list(queries))
    cosines = asked @ rows.T
    top = np.argsort(-cosines, axis=1, kind="stable")[:, :LIMIT]
    meaning = [[memories[n].id for n in row] for row in top]
    return words, meaning


# The run -------------------------------------------------------------------------------------

WORDS, HYBRID = "words only (the base)", "hybrid (the plugin)"
# The original key is LoCoMo's evidence; the corrected one takes the audit's where it has one.
KEYS = ("original", "corrected")
OFFLINE = ("BM25 alone (offline)", "cosine alone (offline)")
BEFORE = {WORDS: "words only, baseline build", HYBRID: "hybrid, baseline build"}


def run_conversation(conversation: Conversation, scratch: Path, baseline: str | None) -> dict[str, Any]:
    """Every ranking's per-question scores and the servers' latencies for one conversation.

    With `baseline` (another installation's Python), its two servers search the same
    vault too, each right after this installation's, so both builds are timed in one run.
    """
    import anyio

    vault, cache = scratch / f"{conversation.name}.sqlite3", scratch / f"{conversation.name}.cache"
    init_vault(vault, cache)
    started = time.monotonic()
    items = [Item(turn.dia_id, turn.speaker, turn.text) for turn in conversation.turns]
    held = anyio.run(save_items, vault, cache, items)
    saved = time.monotonic() - started
    queries = [question.text for question in conversation.questions]
    servers = [(WORDS, sys.executable, False, cache), (HYBRID, sys.executable, True, cache)]
    if baseline is not None:
        other = scratch / f"{conversation.name}.baseline-cache"
        servers.insert(1, (BEFORE[WORDS], baseline, False, other))
        servers.append((BEFORE[HYBRID], baseline, True, other))
    ranked: dict[str, list[list[str]]] = {}
    seconds: dict[str, list[float]] = {}
    for name, python, plugins, where in servers:

        async def searched(where: Path = where, plugins: bool = plugins, python: str = python) -> Any:
            return await server_rankings(vault, where, queries, plugins=plugins, python=python)

        ranked[name], seconds[name] = anyio.run(searched)
    ranked[OFFLINE[0]], ranked[OFFLINE[1]] = offline_rankings(vault, queries)
    scores = {
        (name, key): [
            question_scores([frozenset(held.get(memory_id, ())) for memory_id in ids], question.key(key))
            for ids, question in zip(rows, conversation.questions, strict=True)
        ]
        for name, rows in ranked.items()
        for key in KEYS
    }
    print(
        f"{conversation.name}: {len(conversation.turns)} turns as {len(held)} memories "
        f"saved in {saved:.0f} s, {len(queries)} questions; "
        + ", ".join(
            f"{name} hit@5 {mean_scores(rows)['hit@5']:.3f} ({key} key)"
            for (name, key), rows in scores.items()
        ),
        flush=True,
    )
    return {"scores": scores, "seconds": seconds}


def table(rows: Mapping[tuple[str, str], Mapping[str, float]], latency: Mapping[str, float]) -> list[str]:
    """One row per ranking and key, the original key's first; the latency on the original key's row."""
    lines = [
        "| ranking | key | hit@1 | hit@5 | hit@10 | recall@5 | recall@10 | MRR | median search |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for (name, key), figures in rows.items():
        ms = f"{latency[name] * 1000:.1f} ms" if name in latency and key == KEYS[0] else "-"
        lines.append(f"| {name} | {key} | " + " | ".join(f"{figures[m]:.3f}" for m in METRICS) + f" | {ms} |")
    return lines


def render(
    label: str, conversations: Sequence[Conversation], results: Sequence[Mapping[str, Any]], command: str
) -> str:
    every: dict[tuple[str, str], list[dict[str, float]]] = {}
    seconds: dict[str, list[float]] = {}
    for result in results:
        for name, rows in result["scores"].items():
            every.setdefault(name, []).extend(rows)
        for name, values in result["seconds"].items():
            seconds.setdefault(name, []).extend(values)
    latency = {name: statistics.median(values) for name, values in seconds.items()}
    questions = [q for conversation in conversations for q in conversation.questions]
    turns = sum(len(conversation.turns) for conversation in conversations)
    changed = sum(1 for q in questions if q.key("corrected") != q.evidence)
    lines = [
        f"## {label}",
        "",
        f"Measured {datetime.now(UTC):%Y-%m-%d} on {platform.machine()}, Python {platform.python_version()},",
        f"with `{command}`: conversations {', '.join(c.name for c in conversations)}",
        f"({turns:,} turns, {len(questions)} questions of categories 1-4; the corrected key changes the",
        f"evidence of {changed} of them).",
        "",
        *table({name: mean_scores(rows) for name, rows in every.items()}, latency),
        "",
    ]
    for category, title in CATEGORIES.items():
        chosen = [n for n, q in enumerate(questions) if q.category == category]
        if not chosen:
            continue
        lines += [f"Category {category} ({title}), {len(chosen)} questions:", ""]
        per = {name: mean_scores([rows[n] for n in chosen]) for name, rows in every.items()}
        lines += [*table(per, {}), ""]
    return "\n".join(lines)


HEADER = f"""{TITLE}

Written by scripts/bench_locomo.py (`nox -s bench`, or `python scripts/bench_locomo.py DATA_DIR`).

**Data.** LoCoMo (Maharana et al., "Evaluating Very Long-Term Conversational Memory of LLM
Agents", ACL 2024; the public repository snap-research/locomo, `data/locomo10.zip`): long
conversations between two people, each question with the turns that answer it marked. The
conversations are read at run time from a directory outside this repository; none of the
data is kept here.

**Method.** Per conversation, a new vault; every turn saved as one memory through the
server's save_memory over stdio (entity = the speaker, text = the turn, a shared photo as
` [photo: <caption>]`); every question of categories 1-4 (multi-hop, temporal, open-domain,
single-hop) searched with limit 10 through search_memory: words only = the server with no
plugin; hybrid = the server with squirrel-mcp-embeddings, once it has embedded every turn.
The offline rows rank the same vault's memories in the benchmark's own process, for
context: BM25 alone (the base's word search called directly) and cosine alone (the plugin's
model, every memory by its cosine to the question). hit@k: an evidence turn is among the
first k results; recall@k: the share of the question's evidence turns among them; MRR: 1 /
the rank of the first evidence turn in the 10 results, 0 when none is there. Identical turns
of one speaker are one memory, so a result stands for every turn it holds. Median search:
the search_memory round trip as the client sees it.

**Two keys.** Every ranking is scored twice, on the same searches: against LoCoMo's own
evidence (key "original") and against the corrected evidence (key "corrected"): an
independent audit of the key (dial481/locomo-audit, CC BY-NC 4.0) found questions whose cited
evidence turns are wrong or incomplete; where it gives other turns for a question (matched by
the question's text), the corrected key takes them, and every other question keeps its own.
"""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "data", nargs="?", type=Path, default=DATA, help="the directory of LoCoMo's JSON files"
    )
    parser.add_argument("--label", default="Current build", help="the report's heading for this run")
    parser.add_argument("--only", help="conversation file names to run, separated by commas (e.g. 26,30)")
    parser.add_argument(
        "--baseline", metavar="PYTHON", help="also run the servers of another installation, by its Python"
    )
    args = parser.parse_args(argv)
    files = conversation_files(args.data)
    if args.only:
        files = [path for path in files if path.stem in args.only.split(",")]
    if not files:
        print(f"bench_locomo: no LoCoMo conversations in {args.data}; skipped", flush=True)
        return 0
    conversations = [load(path) for path in files]
    command = "python scripts/bench_locomo.py" + (f" --only {args.only}" if args.only else "")
    if args.baseline:
        command += " --baseline PYTHON"
    with tempfile.TemporaryDirectory(prefix="squirrel-locomo-") as scratch:
        results = [
            run_conversation(conversation, Path(scratch), args.baseline) for conversation in conversations
        ]
    section = render(args.label, conversations, results, command)
    write_section(REPORT, HEADER, section, args.label)
    print(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
