"""Crash safety: kill -9 while writing, then check that nothing acknowledged is lost or half-written.

Three kinds of run, each ended by SIGKILL at a random moment:

- server: the real server (`python -m squirrel_mcp`) over stdio, driven by a minimal
  JSON-RPC client of this file (so the test owns the process and its pid): saves,
  corrections, deletes and restores until the kill, which lands during start-up
  (unlocking the vault) in every fourth run and 0-1 s into the calls in the others.
- store: a child forked by crash_worker.py that drives the real MemoryStore on a
  LocalVault in a loop and prints each write that returned; ~50-100x cheaper than a
  server start, so these runs are many.
- vectors: a forked child that saves memories and has the embeddings plugin's Hybrid
  (with a stand-in embedder) embed them and write its vector file, by its saver thread
  and by flush(), until killed mid-write.
- plugin: a few runs of the real server with the real embeddings plugin and model,
  saving and searching (so the plugin's saver thread rewrites the vector file) until
  killed.

After every kill: the vault opens (a fresh connection, SQLite's integrity check),
every acknowledged revision is there with the text that was sent, every stored record
decrypts (nothing half-written is visible), and the vector file opens and holds rows
that are exactly the vectors of the memories they name, no fewer than the last
acknowledged write. A kill -9 ends the process, not the machine: what reached the
kernel survives it, so this tests the write path's atomicity, not fsync on power loss.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from squirrel_mcp.book.errors import MemoryOperationError
from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.book.reader import MemoryReader
from squirrel_mcp.cli.bridge import LOST
from squirrel_mcp.core.files import STALE_TEMP_SECONDS, TEMP_MARKER, atomic_write
from squirrel_mcp.core.models import Revision
from squirrel_mcp_embeddings import vectors
from squirrel_mcp_embeddings.warmup import recipe
from tests.conftest import PASSPHRASE, shared_runtime
from tests.reliability.conftest import create_vault, open_vault
from tests.reliability.crash_worker import STAMP, fake_vector
from tests.reliability.figures import record
from tests.shared_support import memory_processes, shared_host_env, wait_until

WORKER = Path(__file__).with_name("crash_worker.py")
SEED = 8
# Every loop is bounded by a count and by time; the counts are what docs/reliability.md reports.
# A quiet machine reaches the counts within about half the time; the rest is room for a run
# beside other tests (`nox -s tests` runs four at a time), where the minimums below must hold.
SERVER_RUNS, SERVER_SECONDS = 24, 180.0
# Shared: a run starts the bridge and two memory processes (the killed one, the one it reconnects to).
SHARED_RUNS, SHARED_SECONDS = 12, 150.0
STORE_RUNS, STORE_SECONDS = 200, 150.0
STORE_RUNS_PER_VAULT = 40
VECTOR_RUNS, VECTOR_SECONDS = 50, 90.0
# The real plugin's check: few runs (each loads the model, ~3 s), on a vault of this many memories.
PLUGIN_RUNS, PLUGIN_SECONDS, PLUGIN_SEEDED = 3, 60.0, 200
# The vector check starts a fresh vault (and file) this often, so files stay a few MB.
VECTOR_RUNS_PER_VAULT = 10

Ack = tuple[str, int, str, bool]


class Killer:
    """A SIGKILL of `server` `delay` seconds after it is armed; arming it again does nothing.

    A bare threading.Timer can be started only once, and "has it started?" cannot be
    asked without a race: a start-up kill that had already fired looked like a timer
    never started, and starting it again raised RuntimeError under load. The armed
    flag answers that question exactly.
    """

    def __init__(self, server: RawServer, delay: float) -> None:
        self._done = threading.Event()
        self._timer = threading.Timer(delay, self._kill, args=(server,))
        self._lock = threading.Lock()
        self._armed = False

    def _kill(self, server: RawServer) -> None:
        server.kill()
        self._done.set()

    def fired(self) -> bool:
        """True once the kill has been done."""
        return self._done.is_set()

    def arm(self) -> None:
        """Start the countdown, unless it was started before."""
        with self._lock:
            if not self._armed:
                self._armed = True
                self._timer.start()

    def wait(self) -> None:
        """Arm it if it was not (the calls ended first), then wait until the kill is done."""
        self.arm()
        self._timer.join()


def reap(server: RawServer, killer: Killer) -> int:
    """The kill done (fired now if it had not been armed), the server's exit code."""
    killer.wait()
    return server.wait()


def lost_acks(store: MemoryStore, acks: list[Ack]) -> list[Ack]:
    """The acknowledged revisions the store does not hold exactly as acknowledged."""
    store.refresh()
    missing = []
    for memory_id, number, text, deleted in acks:
        try:
            held = {revision.revision: revision for revision in store.history(memory_id)}
        except MemoryOperationError:
            # Unknown or unreadable: the memory is not there as acknowledged.
            held = {}
        revision = held.get(number)
        if revision is None or revision.text != text or revision.deleted != deleted:
            missing.append((memory_id, number, text, deleted))
    return missing


def unreadable_records(path: Path) -> int:
    """Records in the vault that do not decrypt, counted on a fresh open (half-written ones would)."""
    store = open_vault(path)
    try:
        stored = len(store._log.storage.changes_since(0)[0])
        readable = sum(len(history) for history in store.all_revisions())
        return stored - readable
    finally:
        store._log.storage.close()


def integrity_ok(path: Path) -> bool:
    """SQLite's own check of the vault file, on a fresh connection (which also recovers the WAL)."""
    db = sqlite3.connect(path)
    try:
        return db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        db.close()


# The real server --------------------------------------------------------------


class ServerGone(Exception):
    """The server's stdout closed: it was killed."""


def lost_by_the_bridge(message: dict[str, Any]) -> bool:
    """An answer of the bridge's own: the memory process ended before it answered the call."""
    error = message.get("error") or {}
    content = (message.get("result") or {}).get("content") or [{}]
    return LOST in (error.get("message"), content[0].get("text"))


class RawServer:
    """The real server over stdio, spoken to in MCP's newline-delimited JSON-RPC."""

    def __init__(self, env: dict[str, str], stderr: Path, *, shared: bool = False) -> None:
        # Shared: this process is a host's bridge, and the kill is the vault's memory process's.
        self.shared = shared
        self.env = env
        self.killed: int | None = None
        self._stderr = stderr.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "squirrel_mcp"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env={"PATH": os.environ["PATH"], **env},
        )
        self._next_id = 0

    def _send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(json.dumps(message).encode() + b"\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError) as error:
            raise ServerGone from error

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self._next_id += 1
        self._send({"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params})
        assert self.process.stdout is not None
        while True:
            line = self.process.stdout.readline()
            if not line.endswith(b"\n"):
                # EOF, possibly after part of an answer: the kill came first, nothing was acknowledged.
                raise ServerGone
            message = json.loads(line)
            if message.get("id") == self._next_id:
                if self.shared and lost_by_the_bridge(message):
                    raise ServerGone  # the memory process was killed before it answered
                assert "error" not in message, message
                result: dict[str, Any] = message["result"]
                return result

    def initialize(self) -> None:
        self.request(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "crash-test", "version": "0"},
            },
        )
        self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        result = self.request("tools/call", {"name": tool, "arguments": arguments})
        assert not result.get("isError"), result
        structured: dict[str, Any] = result["structuredContent"]
        return structured

    def kill(self) -> None:
        if not self.shared:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGKILL)
            return
        # The vault's memory process, once the bridge has started it (a start-up kill comes first).
        deadline = time.monotonic() + 60
        while not (running := memory_processes(self.env)):
            if time.monotonic() > deadline or self.process.poll() is not None:
                return
            time.sleep(0.02)
        with contextlib.suppress(ProcessLookupError):
            os.kill(running[0], signal.SIGKILL)
            self.killed = running[0]

    def wait(self) -> int:
        if self.shared:
            # The host leaves: the bridge ends once the memory process it reconnected to has
            # closed the store (idle time 0); that process is gone before the next run starts.
            assert self.process.stdin is not None
            with contextlib.suppress(OSError):
                self.process.stdin.close()
        code = self.process.wait(timeout=60)
        if self.shared:
            wait_until(lambda: not memory_processes(self.env), "the memory process ends")
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        self._stderr.close()
        return code


def drive_server(
    server: RawServer, rng: random.Random, live: list[str], dead: list[str], killer: Killer
) -> list[Ack]:
    """Save, correct, delete, restore until the server is gone; the acknowledged revisions.

    `killer` is armed once the server answered the handshake, unless it was armed before.
    """
    acks: list[Ack] = []
    try:
        server.initialize()
        if killer.fired():
            # A start-up kill of the memory process: the bridge answered the handshake from a
            # new one, and this run's kill is done.
            raise ServerGone
        killer.arm()
        for n in range(2_000):
            roll = rng.random()
            if not live or roll < 0.5:
                text = f"server run note {n}" + " acorn" * rng.randint(1, 300)
                memory = server.call("save_memory", text=text)["memory"]
                live.append(memory["id"])
                acks.append((memory["id"], memory["revision"], memory["text"], False))
            elif roll < 0.8:
                target = rng.choice(live)
                text = f"server correction {n}" + " oak" * rng.randint(1, 300)
                memory = server.call("update_memory", id=target, text=text)["memory"]
                acks.append((target, memory["revision"], memory["text"], False))
            elif roll < 0.9 or not dead:
                target = live.pop(rng.randrange(len(live)))
                answer = server.call("delete_memory", id=target)
                dead.append(target)
                acks.append((target, answer["memory"]["revision"], answer["memory"]["text"], True))
            else:
                target = dead.pop(rng.randrange(len(dead)))
                answer = server.call("restore_memory", id=target)
                live.append(target)
                acks.append((target, answer["memory"]["revision"], answer["memory"]["text"], False))
    except ServerGone:
        pass
    return acks


@pytest.mark.parametrize("shared", [False, True], ids=["a server of its own", "shared memory process"])
def test_kill_the_server_while_it_writes(tmp_path: Path, vault_env: dict[str, str], shared: bool) -> None:
    """SIGKILL of the server; shared: of the memory process under a host's bridge, which reconnects."""
    vault = Path(vault_env["SQUIRREL_VAULT"])
    create_vault(vault)
    shared_env = {**shared_host_env(vault_env, runtime=shared_runtime()), "SQUIRREL_MCP_SHARED_IDLE": "0"}
    env = shared_env if shared else {**vault_env, "SQUIRREL_MCP_SHARED": "0"}
    runs_wanted, seconds = (SHARED_RUNS, SHARED_SECONDS) if shared else (SERVER_RUNS, SERVER_SECONDS)
    rng = random.Random(SEED)
    live: list[str] = []
    dead: list[str] = []
    every_ack: list[Ack] = []
    runs = startup_kills = 0
    lost: set[Ack] = set()
    started = time.monotonic()
    # The time budget bounds the runs past the minimum only: a loaded machine makes each run
    # slower, never the check weaker.
    minimum = min(runs_wanted, 6 if shared else 10)
    while runs < runs_wanted and (runs < minimum or time.monotonic() - started < seconds):
        server = RawServer(env, tmp_path / "stderr.log", shared=shared)
        # Every fourth run dies during start-up (~1 s: imports, unlocking the vault), the
        # others 0-1 s after the handshake, in the middle of the calls.
        killer = Killer(server, rng.uniform(0.0, 1.0))
        if runs % 4 == 0:
            killer.arm()
            startup_kills += 1
        try:
            acks = drive_server(server, rng, live, dead, killer)
        finally:
            code = reap(server, killer)
        runs += 1
        if shared:
            # The bridge itself ends as a host's server does when its input closes.
            assert server.killed is not None and code == 0, (code, (tmp_path / "stderr.log").read_text())
        else:
            assert code == -signal.SIGKILL, (code, (tmp_path / "stderr.log").read_text())
        every_ack += acks
        assert integrity_ok(vault)
        store = open_vault(vault)
        try:
            lost.update(lost_acks(store, every_ack))
            # What the driver believes live or deleted must be what the vault says, for the next run.
            state = {m.id: m.deleted for m in store.current(include_deleted=True)}
        finally:
            store._log.storage.close()
        live[:] = [i for i, gone in state.items() if not gone]
        dead[:] = [i for i, gone in state.items() if gone]
    unreadable = unreadable_records(vault)
    killed = "the memory process under a host's bridge" if shared else "real server over stdio"
    record(
        "crash-server-shared" if shared else "crash-server",
        runs=runs,
        faults_injected=runs,
        inputs_tried=len(every_ack),
        data_lost=len(lost) + unreadable,
        seconds=time.monotonic() - started,
        notes=f"{killed}, SIGKILL: {startup_kills} runs 0-1 s after spawn (start-up), "
        f"{runs - startup_kills} runs 0-1 s after the handshake (mid-call); "
        f"{len(every_ack)} acknowledged writes checked after every restart",
    )
    assert runs >= minimum
    assert not lost
    assert unreadable == 0


# Forked children ---------------------------------------------------------------


class Worker:
    """crash_worker.py, started once; each `run` forks a child, kills it and collects its lines."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(WORKER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, "SQUIRREL_PASSPHRASE": PASSPHRASE},
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.decode().rstrip("\n"))

    def _line(self) -> str:
        return self.lines.get(timeout=60)

    def run(self, command: str, kill_after: float) -> tuple[list[str], str]:
        """Start `command` in a child, SIGKILL it `kill_after` s after it is ready; its acks and end."""
        assert self.process.stdin is not None
        self.process.stdin.write(command.encode() + b"\n")
        self.process.stdin.flush()
        first = self._line()
        assert first.startswith("pid "), first
        pid = int(first.split()[1])
        acks: list[str] = []
        ready = self._line()
        assert ready == "ready", ready
        time.sleep(kill_after)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        while True:
            line = self._line()
            if line.startswith("exit "):
                return acks, line.split()[2]
            if line.startswith("ack "):
                acks.append(line[4:])
            else:
                # done / error / notice: the child stopped on its own or wrote a line it must not.
                acks.append(line)

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(b"quit\n")
        self.process.stdin.close()
        self.process.wait(timeout=30)


def check_store_vault(vault: Path, acks: list[Ack]) -> int:
    """After the last kill on `vault`: a fresh open holds every acknowledged write; how many it lacks."""
    final = open_vault(vault)
    try:
        lost = len(lost_acks(final, acks))
    finally:
        final._log.storage.close()
    return lost + unreadable_records(vault)


def test_kill_a_store_writer_many_times(tmp_path: Path) -> None:
    rng = random.Random(SEED + 1)
    worker = Worker()
    every_ack: list[Ack] = []
    acks_here: list[Ack] = []
    runs = 0
    lost: list[Ack] = []
    lost_at_end = 0
    started = time.monotonic()
    try:
        # As above: the time budget bounds only the runs past the minimum.
        while runs < STORE_RUNS and (
            runs < min(STORE_RUNS, 50) or time.monotonic() - started < STORE_SECONDS
        ):
            if runs % STORE_RUNS_PER_VAULT == 0:
                # A fresh vault now and then keeps each unlock (which decrypts everything) quick.
                vault = tmp_path / f"vault{runs}.sqlite3"
                create_vault(vault)
                verifier = open_vault(vault)
                acks_here = []
            lines, code = worker.run(f"store {vault} {rng.randrange(10**9)}", rng.uniform(0.0, 0.08))
            runs += 1
            assert code == str(-signal.SIGKILL), lines[-3:]
            acks: list[Ack] = [tuple(json.loads(line)) for line in lines]  # type: ignore[misc]
            every_ack += acks
            acks_here += acks
            assert integrity_ok(vault)
            lost += lost_acks(verifier, acks)
            if runs % STORE_RUNS_PER_VAULT == 0 or runs == STORE_RUNS:
                verifier._log.storage.close()
                lost_at_end += check_store_vault(vault, acks_here)
    finally:
        worker.close()
    if runs % STORE_RUNS_PER_VAULT and runs != STORE_RUNS:
        # Stopped by the time bound mid-vault.
        verifier._log.storage.close()
        lost_at_end += check_store_vault(vault, acks_here)
    record(
        "crash-store",
        runs=runs,
        faults_injected=runs,
        inputs_tried=len(every_ack),
        data_lost=len(lost) + lost_at_end,
        seconds=time.monotonic() - started,
        notes="forked child drives MemoryStore+LocalVault (save/correct/delete/restore), "
        f"SIGKILL 0-80 ms after it is ready; {len(every_ack)} acknowledged writes checked "
        f"after each kill and on a fresh open per vault ({STORE_RUNS_PER_VAULT} runs a vault)",
    )
    assert runs >= min(STORE_RUNS, 50)
    assert not lost
    assert lost_at_end == 0


def vector_rows_ok(path: Path, store: MemoryStore) -> tuple[int, int]:
    """Open the vector file as the plugin does; (rows, rows whose vector is not its memory's)."""
    reader = MemoryReader(store)
    try:
        table = vectors.load(path, reader.derive_key(vectors.KEY_PURPOSE), store.account_id, STAMP)
    except vectors.VectorFileError:
        # Half-written or otherwise corrupt: the plugin would throw every vector away.
        return 0, 1
    assert table is not None, "the vector file is gone"
    store.refresh()
    wrong = 0
    for memory_id, number in zip(table.ids, table.revisions, strict=True):
        memory: Revision | None = reader.get(memory_id)
        if (
            memory is None
            or memory.revision != number
            or not np.allclose(table.vector(memory_id), fake_vector(recipe(memory)), atol=1e-6)
        ):
            wrong += 1
    return len(table), wrong


def test_kill_the_vector_file_writer(tmp_path: Path) -> None:
    rng = random.Random(SEED + 2)
    worker = Worker()
    runs = rows_checked = bad = 0
    started = time.monotonic()
    try:
        # As above: the time budget bounds only the runs past the minimum.
        while runs < VECTOR_RUNS and (
            runs < min(VECTOR_RUNS, 25) or time.monotonic() - started < VECTOR_SECONDS
        ):
            if runs % VECTOR_RUNS_PER_VAULT == 0:
                home = tmp_path / f"vault{runs}"
                vault, cache = home / "vault.sqlite3", home / "cache"
                create_vault(vault)
                verifier = open_vault(vault)
                path = vectors.vector_path(verifier.account_id, {vectors.CACHE_DIR_VARIABLE: str(cache)})
                last_acked = 0
            lines, code = worker.run(f"vectors {vault} {cache} {rng.randrange(10**9)}", rng.uniform(0.0, 0.3))
            runs += 1
            assert code == str(-signal.SIGKILL), lines[-3:]
            assert all(line.isdigit() for line in lines), [x for x in lines if not x.isdigit()]
            if lines:
                last_acked = int(lines[-1])
            if path.exists():
                rows, wrong = vector_rows_ok(path, verifier)
                rows_checked += rows
                bad += wrong
                # Old or new, never older than the last write the plugin finished.
                if rows < last_acked:
                    bad += 1
            else:
                assert last_acked == 0
            if runs % VECTOR_RUNS_PER_VAULT == 0:
                verifier._log.storage.close()
        leftovers = sorted(tmp_path.glob("vault*/cache/squirrel-notes/.*.tmp"))
    finally:
        worker.close()
    # Temp files of writers killed mid-write: once stale, the next write of that file removes them.
    for temp in leftovers:
        os.utime(temp, (time.time() - STALE_TEMP_SECONDS - 60,) * 2)
        # ".<file name>.squirrel-mcp-<random>.tmp", as mkstemp named it: the next write of <file name>
        # cleans up.
        target = temp.with_name(temp.name[1:].rsplit(".", 2)[0])
        # A writer killed during a vault's first write leaves a temp file and no file yet.
        atomic_write(target, target.read_bytes() if target.exists() else b"")
    left_after = sorted(tmp_path.glob("vault*/cache/squirrel-notes/.*.tmp"))
    record(
        "crash-vectors",
        runs=runs,
        faults_injected=runs,
        inputs_tried=rows_checked,
        data_lost=bad,
        seconds=time.monotonic() - started,
        notes="forked child: saves + plugin Hybrid (stand-in embedder, 384 dims) writing the vector "
        "file (saver thread and flush), SIGKILL 0-300 ms after ready; every row of the file checked; "
        f"{len(leftovers)} temp files left by kills mid-write, all removed by the next write once stale",
    )
    assert runs >= min(VECTOR_RUNS, 25)
    assert bad == 0
    assert not left_after


def test_a_write_removes_stale_temp_files_and_keeps_young_ones(tmp_path: Path) -> None:
    target = tmp_path / "memory-vectors-abc.bin"
    target.write_bytes(b"old")
    stale = tmp_path / f".{target.name}.{TEMP_MARKER}killed01.tmp"
    young = tmp_path / f".{target.name}.{TEMP_MARKER}writing2.tmp"
    other = tmp_path / f".another-file.bin.{TEMP_MARKER}killed03.tmp"
    for temp in (stale, young, other):
        temp.write_bytes(b"partial")
        temp.chmod(0o600)  # as mkstemp makes them
    aged = time.time() - STALE_TEMP_SECONDS - 60
    os.utime(stale, (aged, aged))
    os.utime(other, (aged, aged))
    atomic_write(target, b"new")
    assert target.read_bytes() == b"new"
    # The stale one of this file goes; one another live process may be writing stays, as
    # does a stale temp of some other file (its own next write removes it).
    assert not stale.exists()
    assert young.exists()
    assert other.exists()


def test_kill_the_server_while_the_real_plugin_keeps_vectors(
    tmp_path: Path, vault_env: dict[str, str]
) -> None:
    """The real server with the real embeddings plugin and model, killed while it saves and searches."""
    from squirrel_mcp_embeddings import embedder
    from squirrel_mcp_embeddings.hooks import manifest_sha256
    from squirrel_mcp_embeddings.integrity import ModelNotLoaded
    from squirrel_mcp_embeddings.warmup import RECIPE_VERSION

    try:
        model = embedder.load()
    except ModelNotLoaded as error:
        pytest.skip(f"the model is not fetched ({error.reason}): nox -s fetch_model")
    stamp = vectors.Stamp(model.manifest.model, manifest_sha256(), RECIPE_VERSION, model.manifest.dimensions)
    vault = Path(vault_env["SQUIRREL_VAULT"])
    create_vault(vault)
    seeded = open_vault(vault)
    try:
        for n in range(PLUGIN_SEEDED):
            seeded.save(
                entity="user", text=f"seeded memory {n} about acorns", category="note", tags=[], keywords=[]
            )
        account_id = seeded.account_id
    finally:
        seeded._log.storage.close()
    # A server of its own, the process killed: a bridge's kill would leave the memory process,
    # which holds the plugin, unharmed (and waiting its idle time after the test).
    env = {
        **vault_env,
        "SQUIRREL_MCP_SHARED": "0",
        "SQUIRREL_MCP_PLUGINS": "embeddings",
        "SQUIRREL_MEMORY_CACHE_DIR": str(tmp_path / "cache"),
    }
    path = vectors.vector_path(account_id, {vectors.CACHE_DIR_VARIABLE: env["SQUIRREL_MEMORY_CACHE_DIR"]})
    rng = random.Random(SEED + 3)
    runs = rows_checked = bad = hybrid_searches = 0
    every_ack: list[Ack] = []
    started = time.monotonic()
    while runs < PLUGIN_RUNS and time.monotonic() - started < PLUGIN_SECONDS:
        server = RawServer(env, tmp_path / "stderr.log")
        killer = Killer(server, rng.uniform(0.0, 2.0))
        try:
            server.initialize()
            # The model loads in the background: search until the plugin ranks (bounded).
            ready_by = time.monotonic() + 60
            while server.call("search_memory", query="acorns")["ranking"] != "hybrid":
                assert time.monotonic() < ready_by, "the plugin never became ready"
                time.sleep(0.2)
            # Searches rank while the warm-up still runs; the vector file is written once it is
            # done (then again as memories change): the kills must land on a plugin that keeps one.
            while not path.exists():
                assert time.monotonic() < ready_by, "the plugin never wrote its vector file"
                time.sleep(0.2)
            killer.arm()
            for n in range(10_000):
                text = f"plugin run {runs} memory {n} about oak trees"
                memory = server.call("save_memory", text=text)["memory"]
                every_ack.append((memory["id"], memory["revision"], memory["text"], False))
                # Embeds the new memory; the plugin's saver thread then rewrites the file.
                hybrid_searches += server.call("search_memory", query="oak trees")["ranking"] == "hybrid"
        except ServerGone:
            pass
        finally:
            code = reap(server, killer)
        runs += 1
        assert code == -signal.SIGKILL, (code, (tmp_path / "stderr.log").read_text())
        store = open_vault(vault)
        try:
            bad += len(lost_acks(store, every_ack))
            try:
                table = vectors.load(
                    path, MemoryReader(store).derive_key(vectors.KEY_PURPOSE), account_id, stamp
                )
            except vectors.VectorFileError:
                bad += 1
                continue
            assert table is not None, "the plugin never wrote its vector file"
            reader = MemoryReader(store)
            rows = list(zip(table.ids, table.revisions, strict=True))
            rows_checked += len(rows)
            for memory_id, number in rows:
                memory = reader.get(memory_id)
                bad += memory is None or memory.revision != number
            # The model's own vectors, recomputed for a sample of rows.
            sample = [reader.get(memory_id) for memory_id, _ in rng.sample(rows, k=min(20, len(rows)))]
            present = [memory for memory in sample if memory is not None]
            expected = model.embed([recipe(memory) for memory in present])
            for memory, vector in zip(present, expected, strict=True):
                bad += not np.allclose(table.vector(memory.id), vector, atol=1e-4)
        finally:
            store._log.storage.close()
    record(
        "crash-plugin",
        runs=runs,
        faults_injected=runs,
        inputs_tried=rows_checked,
        data_lost=bad,
        seconds=time.monotonic() - started,
        notes=f"real server with the real embeddings plugin and model, {PLUGIN_SEEDED} memories; once it "
        f"ranks hybrid, save+search (the saver thread rewrites the vector file) until SIGKILL 0-2 s later; "
        f"{len(every_ack)} acknowledged saves, {hybrid_searches} hybrid searches; after each kill the "
        "file opens, every row names a current revision, 20 rows equal the model's vectors",
    )
    assert runs >= 1
    assert bad == 0
