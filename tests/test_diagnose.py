"""The recall diagnostic (squirrel-mcp-diagnose) on a vault holding the recall corpus, with the real model.

What docs/hybrid.md promises and these tests check on the installed console script:
it prints ids, ranks, scores and the user's own queries, never memory text,
entities or tags (checked against every memory of the corpus); its vectors live
in a temporary directory that is gone after a normal exit and after Ctrl-C; the
server's own vector file is byte-identical before and after; the passphrase is
asked on the terminal without echo when it is not in the environment.
"""

from __future__ import annotations

import json
import os
import pty
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.cli.unlock import UserError
from squirrel_mcp.storage.local import LocalVault
from squirrel_mcp_embeddings.diagnose import read_questions
from tests.conftest import PASSPHRASE, call, needs_model, run_cli, secrets_of_this_test, server_params
from tests.recall.corpus import BY_ID, CORPUS, QUERIES, revision
from tests.ui_support import create_vault

pytestmark = needs_model
SCRIPT = Path(sys.executable).with_name("squirrel-mcp-diagnose")
# The words the diagnostic prints around ids and numbers; anything else it prints is the user's query.
TEMPLATE = set(
    """memories model floor ranking as search memory with nearmisses match of near miss by meaning cosine
    under above the not in first results or misses no vector hybrid lexical holds expected piece and more
    an top matches queries sentence transformers all minilm l6 v2""".split()  # noqa: SIM905
)
ID_OR_NUMBER = re.compile(r"^(?:[0-9a-f]{16}|\d+)$")


def questions(count: int) -> list[dict[str, str]]:
    """Queries of the corpus, each expecting the first 24 characters of its first memory's text."""
    chosen = [
        {"query": query["query"], "expect": BY_ID[query["expected"][0]]["text"][:24]}
        for query in (QUERIES * (count // len(QUERIES) + 1))[:count]
    ]
    return chosen


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A vault holding the corpus, and the vector file the real server wrote for it."""
    root = tmp_path_factory.mktemp("diagnose")
    env = {
        "SQUIRREL_VAULT": str(root / "data" / "vault.sqlite3"),
        "SQUIRREL_PASSPHRASE": PASSPHRASE,
        "HOME": str(root / "home"),
        "XDG_CACHE_HOME": str(root / "xdg-cache"),
        "SQUIRREL_MCP_PLUGINS": "embeddings",
        "SQUIRREL_MEMORY_CACHE_DIR": str(root / "cache"),
    }
    (root / "data").mkdir(mode=0o700)
    store = MemoryStore.create(LocalVault(Path(env["SQUIRREL_VAULT"]), create=True), PASSPHRASE)
    for memory in CORPUS:
        store.import_history([revision(memory)])

    async def search_until_hybrid() -> None:
        async with Client(server_params(env)) as client:
            deadline = time.monotonic() + 120
            while (await call(client, "search_memory", query="peanuts"))["ranking"] != "hybrid":
                assert time.monotonic() < deadline, "the server never ranked hybrid"
                await anyio.sleep(0.2)

    anyio.run(search_until_hybrid)
    (vectors,) = (root / "cache" / "squirrel-notes").glob("memory-vectors-*.bin")
    return {"env": env, "root": root, "vectors": vectors}


def diagnostic_env(served: dict[str, Any], scratch: Path) -> dict[str, str]:
    """The served vault's environment; temporary files go to `scratch`, output unbuffered."""
    scratch.mkdir(exist_ok=True)
    return {**served["env"], "PATH": os.environ["PATH"], "TMPDIR": str(scratch), "PYTHONUNBUFFERED": "1"}


def fingerprint(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


def without_queries(output: str) -> str:
    """The output less the lines echoing the user's own queries (`N. "query" (ranking …)`)."""
    return "\n".join(line for line in output.splitlines() if not re.match(r"^\d+\. \"", line))


def test_it_prints_ids_ranks_and_scores_never_memory_text(served: dict[str, Any], tmp_path: Path) -> None:
    queries = tmp_path / "queries.json"
    queries.write_text(json.dumps(questions(len(QUERIES))), encoding="utf-8")
    before = fingerprint(served["vectors"])
    done = subprocess.run(
        [str(SCRIPT), str(queries)],
        env=diagnostic_env(served, tmp_path / "scratch"),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert fingerprint(served["vectors"]) == before
    assert list((tmp_path / "scratch").iterdir()) == []
    assert done.stderr.splitlines() == ["memory: local embeddings ready"]
    report = without_queries(done.stdout)
    assert report.count(" · cosine ") >= len(QUERIES)
    # Every memory of the corpus: none of its text, entity or tags is printed.
    leaked = []
    for memory in CORPUS:
        for value in [memory["text"], memory["entity"], *memory["tags"]]:
            if value.casefold() in report.casefold() and value.casefold() not in TEMPLATE:
                leaked.append(memory["id"])
    assert leaked == []
    # Stronger: every word printed is a template word, a memory id or a number.
    words = set(re.findall(r"[^\W_]+", report.casefold()))
    assert {word for word in words if word not in TEMPLATE and not ID_OR_NUMBER.match(word)} == set()


def default_sigint() -> None:
    """In the child, before exec: SIGINT back to its default action (exec keeps an ignored signal ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_deletes_the_temporary_vectors_and_leaves_the_servers_file(
    served: dict[str, Any], tmp_path: Path
) -> None:
    queries = tmp_path / "queries.json"
    queries.write_text(json.dumps(questions(1000)), encoding="utf-8")
    scratch = tmp_path / "scratch"
    before = fingerprint(served["vectors"])
    running = subprocess.Popen(
        [str(SCRIPT), str(queries)],
        env=diagnostic_env(served, scratch),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl-C as on a terminal, where SIGINT has its default action. A program started in
        # the background by a shell without job control (a CI runner's script, `cmd &`)
        # inherits SIGINT ignored, and Python then installs no KeyboardInterrupt for it:
        # the diagnostic would run to the end and exit 0 (the baseline CI failure of this test).
        preexec_fn=default_sigint,
    )
    try:
        assert running.stdout is not None
        header = running.stdout.readline()
        assert " memories · model " in header
        # The vectors were written to the temporary directory (the plugin saves them after embedding).
        deadline = time.monotonic() + 60
        while not list(scratch.glob("squirrel-diagnose-*/squirrel-notes/memory-vectors-*.bin")):
            assert time.monotonic() < deadline, "no vector file appeared in the temporary directory"
            time.sleep(0.05)
        running.send_signal(signal.SIGINT)
        out, err = running.communicate(timeout=60)
    finally:
        running.kill()
    assert running.returncode == 130, err
    assert "interrupted" in err
    # It stopped part-way: far fewer than the 1000 queries were answered.
    assert out.count("\n1000. ") == 0
    assert list(scratch.iterdir()) == []
    assert fingerprint(served["vectors"]) == before


def on_terminal(argv: list[str], env: dict[str, str], answers: dict[bytes, bytes]) -> tuple[int, str]:
    """Run `argv` with a pseudo-terminal as its terminal, typing each answer once its prompt shows.

    Returns the exit code and everything the terminal showed (what a person would see).
    """
    pid, terminal = pty.fork()
    if pid == 0:  # the child: the program, with this pseudo-terminal as its terminal
        os.execve(argv[0], argv, env)
    seen = b""
    waiting = dict(answers)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            chunk = os.read(terminal, 4096)
        except OSError:  # the child closed the terminal: it has exited
            break
        if not chunk:
            break
        seen += chunk
        for prompt in [prompt for prompt in waiting if prompt in seen]:
            os.write(terminal, waiting.pop(prompt) + b"\n")
    _, status = os.waitpid(pid, 0)
    os.close(terminal)
    assert not waiting, f"never prompted for {sorted(waiting)}"
    return os.waitstatus_to_exitcode(status), seen.decode("utf-8", "replace")


def test_the_passphrase_is_asked_without_echo(served: dict[str, Any], tmp_path: Path) -> None:
    queries = tmp_path / "queries.json"
    queries.write_text(json.dumps(questions(3)), encoding="utf-8")
    env = diagnostic_env(served, tmp_path / "scratch")
    del env["SQUIRREL_PASSPHRASE"]
    code, seen = on_terminal([str(SCRIPT), str(queries)], env, {b"Passphrase: ": PASSPHRASE.encode()})
    assert code == 0, seen[-500:]
    assert " memories · model " in seen
    assert PASSPHRASE not in seen
    assert list((tmp_path / "scratch").iterdir()) == []


def test_a_wrong_passphrase_is_one_line_and_leaves_nothing(served: dict[str, Any], tmp_path: Path) -> None:
    queries = tmp_path / "queries.json"
    queries.write_text(json.dumps(questions(1)), encoding="utf-8")
    env = {**diagnostic_env(served, tmp_path / "scratch"), "SQUIRREL_PASSPHRASE": "not the passphrase"}
    done = subprocess.run([str(SCRIPT), str(queries)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert len(done.stderr.splitlines()) == 1 and "passphrase" in done.stderr
    assert "not the passphrase" not in done.stderr + done.stdout
    assert list((tmp_path / "scratch").iterdir()) == []


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[]", "non-empty list"),
        ('[{"query": "a secret query", "expect": 3}]', "non-empty strings"),
        ('[{"query": "a secret query"}]', "exactly the keys"),
        ('[{"query": "a secret query", "expect": "x", "more": 1}]', "exactly the keys"),
        ("[" * 200_000, "nested too deeply"),
    ],
)
def test_a_bad_queries_file_is_refused_without_quoting_it(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "queries.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(UserError, match=message) as refused:
        read_questions(path)
    assert "secret" not in str(refused.value)


def export_of(texts: list[str], first: int) -> bytes:
    """An export file holding one memory per text, with ids counted from `first`."""
    stamp = "2026-01-01T00:00:00Z"
    memories = []
    for number, text in enumerate(texts, first):
        revision = {
            "id": f"{number:016x}",
            "entity": "user",
            "text": text,
            "tags": [],
            "keywords": [],
            "category": "note",
            "createdAt": stamp,
            "updatedAt": stamp,
            "revision": 1,
            "change": "created",
        }
        memories.append({"id": revision["id"], "revisions": [revision]})
    export = {"format": "squirrel-mcp-export", "version": 1, "exportedAt": stamp, "exportedBy": "a test"}
    return json.dumps({**export, "memories": memories}).encode()


def cache_files(root: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(path.relative_to(root)): fingerprint(path) for path in sorted(root.rglob("*")) if path.is_file()
    }


@pytest.mark.anyio
async def test_a_log_rolled_back_below_this_machines_checkpoint_is_reported_as_serve_does(
    tmp_path: Path,
) -> None:
    env = {
        "SQUIRREL_VAULT": str(tmp_path / "data" / "vault.sqlite3"),
        "SQUIRREL_PASSPHRASE": PASSPHRASE,
        "HOME": str(tmp_path / "home"),
        "XDG_CACHE_HOME": str(tmp_path / "xdg-cache"),
        "SQUIRREL_MCP_PLUGINS": "",
    }
    create_vault(env)
    vault = Path(env["SQUIRREL_VAULT"])
    # Two imports through the command line: this machine's checkpoint records four records.
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    first.write_bytes(export_of(["Keeps bees on the allotment", "Plays the cello on Sundays"], 1))
    second.write_bytes(export_of(["Learns Welsh before breakfast", "Repairs clocks for neighbours"], 3))
    assert run_cli(env, "import", str(first)).returncode == 0
    copy = tmp_path / "copy.sqlite3"
    source, target = sqlite3.connect(vault), sqlite3.connect(copy)
    source.backup(target)
    source.close()
    target.close()
    copy.chmod(0o600)
    assert run_cli(env, "import", str(second)).returncode == 0
    # The vault put back to the copy: two records, below the four this machine saw.
    for suffix in ("", "-wal", "-shm"):
        vault.with_name(vault.name + suffix).unlink(missing_ok=True)
    shutil.copy(copy, vault)

    async with Client(server_params(env)) as client:
        assert "fewer than the 4" in (await call(client, "get_context"))["note"]
    (served_line,) = secrets_of_this_test().stderr_files[-1].read_text(encoding="utf-8").splitlines()
    assert "holds 2 records, fewer than the 4 this machine saw" in served_line

    cache = tmp_path / "xdg-cache"
    before = cache_files(cache)
    queries = tmp_path / "queries.json"
    queries.write_text(json.dumps([{"query": "bees", "expect": "bees"}]), encoding="utf-8")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    done = subprocess.run(
        [str(SCRIPT), str(queries)],
        env={**env, "PATH": os.environ["PATH"], "TMPDIR": str(scratch), "PYTHONUNBUFFERED": "1"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    # The server's line, word for word; then the diagnostic as usual, on the memories the log holds.
    assert done.stderr.splitlines() == [served_line, "memory: local embeddings ready"]
    assert done.stdout.startswith("2 memories · ")
    # Read-only: the checkpoint (and all else in the cache directory) as it was; the vectors went away.
    assert cache_files(cache) == before
    assert list(scratch.iterdir()) == []


def test_errors_name_the_command_as_it_was_run(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path / "home"), "SQUIRREL_MCP_PLUGINS": "embeddings"}
    missing = tmp_path / "no such queries.json"
    as_subcommand = run_cli(env, "diagnose", str(missing))
    assert as_subcommand.returncode == 1
    assert as_subcommand.stderr.decode() == f"squirrel-mcp diagnose: No such file or directory: {missing}\n"
    as_script = subprocess.run(
        [str(SCRIPT), str(missing)],
        env={**env, "PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert as_script.returncode == 1
    assert as_script.stderr == f"squirrel-mcp-diagnose: No such file or directory: {missing}\n"
