"""squirrel-mcp-diagnose: for queries you choose, where the memory you expected ranks.

    squirrel-mcp-diagnose queries.json      (or: nox -s diagnose -- queries.json)

queries.json is a list of {"query": "DNS ad blocking", "expect": "Pi-hole"}: `expect`
is a piece of the memory you mean (its text, entity or a tag), matched ignoring case
and Latin accents. It unlocks your memories as the server does, from the local
vault or the sync server (asking for the API key and the passphrase on the
terminal, without echo, unless SQUIRREL_API_KEY and SQUIRREL_PASSPHRASE are set),
starts the same model through the same plugin code, embeds every memory, and
answers each query with the function behind search_memory (`squirrel_mcp.server.searching.run_search`,
near misses on). For each memory `expect` finds it prints the memory's id, its rank
as a match or a near miss, its rank by meaning among all memories, its cosine, and
how far under the model's floor it is.

What it prints is ids, ranks, scores and your own queries: never memory text,
entities or tags. It writes no log. Its vectors go to a temporary directory,
deleted when it finishes, fails or is interrupted (Ctrl-C, SIGTERM); the server's
own vector file is neither read nor written. The log is checked against this
machine's checkpoint as the server checks it (a log rolled back, or with records
removed or changed, gets the server's line on stderr), but read-only: the
diagnostic moves no checkpoint and writes nothing to the cache directory.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import NoReturn

from squirrel_mcp.plugin_api import (
    MAX_SEARCH_LIMIT,
    USER_ERRORS,
    Config,
    MemoryStore,
    PluginHost,
    Revision,
    SearchResult,
    UserError,
    fold,
    get_plugin_manager,
    open_store,
    run_search,
)
from squirrel_mcp_embeddings import command, hooks, ranker, vectors

PROG = "squirrel-mcp-diagnose"
START_TIMEOUT = 300.0
MAX_QUERIES = 1000
MAX_QUERY_LENGTH = 1000
# Memories listed per query when `expect` is found in several.
MAX_EXPECTED = 5


@dataclass(frozen=True)
class Question:
    """One line of queries.json."""

    query: str
    expect: str


@dataclass(frozen=True)
class Placing:
    """Where one expected memory came for one query."""

    memory_id: str
    found_as: str  # "match", "near miss" or "not returned"
    rank: int | None  # among matches, or among near misses
    meaning_rank: int | None  # by cosine among every memory with a vector
    cosine: float | None


def read_questions(path: Path) -> list[Question]:
    """queries.json, checked; an error names the entry, never its text (it may quote a memory)."""
    try:
        data = json.loads(path.read_bytes())
    except json.JSONDecodeError as error:
        raise UserError(f"{path} is not valid JSON (line {error.lineno})") from None
    except RecursionError:
        raise UserError(f"{path} holds JSON nested too deeply to read") from None
    except UnicodeDecodeError:
        raise UserError(f"{path} is not UTF-8 text") from None
    if not isinstance(data, list) or not data:
        raise UserError(f"{path} must hold a non-empty list of {{'query': ..., 'expect': ...}}")
    if len(data) > MAX_QUERIES:
        raise UserError(f"{path} holds {len(data)} queries; at most {MAX_QUERIES} are read")
    questions = []
    for number, entry in enumerate(data, 1):
        if not isinstance(entry, dict) or set(entry) != {"query", "expect"}:
            raise UserError(f"entry {number} of {path} must have exactly the keys query and expect")
        query, expect = entry["query"], entry["expect"]
        if not all(isinstance(value, str) and value.strip() for value in (query, expect)):
            raise UserError(f"entry {number} of {path}: query and expect must be non-empty strings")
        if len(query) > MAX_QUERY_LENGTH:
            raise UserError(f"entry {number} of {path}: the query has over {MAX_QUERY_LENGTH} characters")
        questions.append(Question(query, expect))
    return questions


def searchable(memories: Sequence[Revision]) -> list[tuple[Revision, list[str]]]:
    """Each memory with its text, entity and tags folded (case, Latin accents): once per run."""
    return [
        (memory, [fold(value) for value in (memory.text, memory.entity, *memory.tags)]) for memory in memories
    ]


def holders(memories: Sequence[tuple[Revision, list[str]]], expect: str) -> list[Revision]:
    """The memories whose text, entity or a tag contains `expect`, ignoring case and Latin accents."""
    piece = fold(expect.strip())
    return [memory for memory, values in memories if any(piece in value for value in values)]


def place(memory_id: str, result: SearchResult, cosines: dict[str, float]) -> Placing:
    """Where `memory_id` came in `result`, and by meaning alone."""
    found_as, rank = "not returned", None
    matches = [hit.id for hit in result.results if not hit.nearMiss]
    misses = [hit.id for hit in result.results if hit.nearMiss]
    if memory_id in matches:
        found_as, rank = "match", matches.index(memory_id) + 1
    elif memory_id in misses:
        found_as, rank = "near miss", misses.index(memory_id) + 1
    cosine = cosines.get(memory_id)
    meaning_rank = None if cosine is None else 1 + sum(other > cosine for other in cosines.values())
    return Placing(memory_id, found_as, rank, meaning_rank, cosine)


def describe(placing: Placing, result: SearchResult, floor: float, count: int) -> str:
    """One report line: ids, ranks and scores only."""
    if placing.found_as == "match":
        where = f"match {placing.rank} of {result.total}"
    elif placing.found_as == "near miss":
        where = f"near miss {placing.rank}"
    else:
        where = f"not in the first {MAX_SEARCH_LIMIT} results or near misses"
    if placing.cosine is None or placing.meaning_rank is None:
        return f"   {placing.memory_id}  {where} · no vector"
    gap = floor - placing.cosine
    under = f"{gap:.4f} under the floor" if gap > 0 else f"{-gap:.4f} above the floor"
    return (
        f"   {placing.memory_id}  {where} · by meaning {placing.meaning_rank} of {count} · "
        f"cosine {placing.cosine:.4f} · {under}"
    )


def diagnose(
    store: MemoryStore, host: PluginHost, hybrid: ranker.Hybrid, questions: Sequence[Question]
) -> None:
    """Answer each question and print where its expected memories came."""
    memories = store.current()
    folded = searchable(memories)
    hits_in_top = with_expected = 0
    print(
        f"{len(memories)} memories · model {hybrid.stamp.model} · floor {hybrid.floor:.3f} · "
        f"ranking as search_memory with nearMisses"
    )
    for number, question in enumerate(questions, 1):
        result = run_search(
            store, host, question.query, limit=MAX_SEARCH_LIMIT, near_misses=True, now=datetime.now(UTC)
        )
        cosines = hybrid.cosines(question.query)
        # The query is the user's own words; json.dumps shows it on one line, quoted.
        print(f"\n{number}. {json.dumps(question.query, ensure_ascii=False)} (ranking {result.ranking})")
        found = holders(folded, question.expect)
        if not found:
            print("   no memory holds the expected piece")
            continue
        # Matches first, then near misses, then the rest; by rank, then by cosine.
        order = {"match": 0, "near miss": 1, "not returned": 2}
        placings = sorted(
            (place(memory.id, result, cosines) for memory in found),
            key=lambda p: (order[p.found_as], p.rank or 0, -(p.cosine or -2.0)),
        )
        with_expected += 1
        hits_in_top += any(p.found_as == "match" and (p.rank or 0) <= 5 for p in placings)
        for placing in placings[:MAX_EXPECTED]:
            print(describe(placing, result, hybrid.floor, len(cosines)))
        if len(placings) > MAX_EXPECTED:
            print(f"   and {len(placings) - MAX_EXPECTED} more memories hold the expected piece")
    print(f"\nan expected memory in the top 5 matches: {hits_in_top} of {with_expected} queries")


def with_api_key(config: Config) -> Config:
    """`config`, with the API key asked on the terminal (no echo) when a sync server is set and it is not."""
    if config.api_base_url is None or config.api_key is not None:
        return config
    if not sys.stdin.isatty():
        raise UserError("SQUIRREL_API_KEY is not set (and there is no terminal to ask on)")
    key = getpass.getpass("API key: ").strip()
    if not key:
        raise UserError("no API key was given")
    return config._replace(api_key=key)


def _interrupted(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None, prog: str = PROG) -> NoReturn:
    """Entry point of the `squirrel-mcp-diagnose` script: run, clean up, end the process.

    `prog` is the name it was run as (`squirrel-mcp diagnose` too): its usage and errors say it.
    """
    code = run(argv, prog)
    sys.stdout.flush()
    sys.stderr.flush()
    # A search cut short by Ctrl-C can leave the runtime's native threads running, and
    # the interpreter's teardown then aborts the process (std::terminate). Everything of
    # ours is closed and deleted by now, so the process ends here, with its own code.
    os._exit(code)


def run(argv: list[str] | None = None, prog: str = PROG) -> int:
    """Diagnose the queries file named in `argv`; the exit code (130 when interrupted).

    Errors are one line on stderr, prefixed with `prog`.
    """
    parser = argparse.ArgumentParser(prog=prog, description=command.DIAGNOSE_HELP)
    command.add_diagnose_arguments(parser)
    args = parser.parse_args(argv)
    # SIGTERM cleans up like Ctrl-C: the temporary vectors must not outlive the run.
    signal.signal(signal.SIGTERM, _interrupted)
    scratch = Path(tempfile.mkdtemp(prefix="squirrel-diagnose-"))
    host: PluginHost | None = None
    embeddings: hooks.EmbeddingsHooks | None = None
    try:
        questions = read_questions(args.queries)
        if os.environ.get(hooks.ENABLED_VARIABLE, "").strip() == "0":
            raise UserError(f"{hooks.ENABLED_VARIABLE}=0 turns embeddings off; unset it to diagnose")
        # Read before the plugin's cache directory moves below: the log checkpoint is this machine's.
        config = with_api_key(Config.from_env())
        # The plugin keeps its vectors under the cache directory: for it, the scratch one.
        os.environ[vectors.CACHE_DIR_VARIABLE] = str(scratch)
        store = open_store(config, create=False, read_only=True)
        pm = get_plugin_manager()
        embeddings = hooks.EmbeddingsHooks()
        pm.register(embeddings, name="embeddings")
        host = PluginHost(pm, notice=lambda line: print(line, file=sys.stderr))
        host.start(config, store)
        if not host.wait_started(START_TIMEOUT) or embeddings.hybrid is None:
            raise UserError("local embeddings did not start (see the line above); nothing to diagnose")
        embeddings.hybrid.warm_all()
        diagnose(store, host, embeddings.hybrid, questions)
        return 0
    except USER_ERRORS as error:
        print(f"{prog}: {error}", file=sys.stderr)
        return 1
    except OSError as error:
        print(f"{prog}: {error.strerror}: {error.filename}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted; the temporary vectors are deleted", file=sys.stderr)
        return 130
    finally:
        # A second Ctrl-C must not stop the clean-up half way.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        # Shutting down writes the vector file (into scratch) and waits for any write in progress.
        if host is not None:
            host.shutdown()
        if embeddings is not None and embeddings.hybrid is not None:
            embeddings.hybrid.close()
        shutil.rmtree(scratch, ignore_errors=True)
