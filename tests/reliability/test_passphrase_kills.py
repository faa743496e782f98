"""Kill -9 during `squirrel-mcp passphrase`: afterwards exactly one passphrase unlocks, every memory reads.

Each run changes the passphrase from whichever of two unlocks now to the other, and
is SIGKILLed at a random moment from its start to about its usual end (measured on
runs left uninterrupted now and then): while it reads the account, derives the keys,
swaps the key (the one write), remembers the new key in its cache, or after it
ended (the kill then does nothing, and the run counts as not killed). A kill that
lands before the swap leaves the old passphrase, one after it the new; either way
the next run goes from the one that works, so the runs go back and forth.

After every run: the account's key opens under exactly one of the two passphrases,
and that one reads every memory with its text; a run not killed exits 0 and leaves
the new one. (On the sync server a killed run's request may still be stored after
the check that followed it: the next run then exits 1 saying the key changed under
it, which is right, and is counted apart.) Three kinds of run:

- local: the command forked by passphrase_worker.py on a local vault (a fork, not a
  1 s interpreter start, and keys at the cheapest scrypt cost, so runs are many);
- sync: the same against the reference sync server (SQLite), where the swap is
  PUT /v1/account/key and the kill may cut the request at any point;
- installed: a few runs of the real `python -m squirrel_mcp passphrase` process,
  with the default scrypt cost, on a vault of its own.

The RNG's seed is printed (SQUIRREL_TEST_SEED sets it) to replay a failure.
"""

from __future__ import annotations

import os
import random
import secrets
import signal
import statistics
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.keys import crypto
from squirrel_mcp.storage import Storage
from squirrel_mcp.storage.local import LocalVault
from squirrel_mcp.storage.remote import RemoteStorage
from tests.conftest import secrets_of_this_test
from tests.reliability.figures import record
from tests.reliability.passphrase_worker import PASSPHRASES
from tests.sync.conftest import start_sync_server

WORKER = Path(__file__).with_name("passphrase_worker.py")
SEED = int(os.environ.get("SQUIRREL_TEST_SEED") or secrets.randbelow(2**32))
# Kills that must land while the command runs, per kind; runs stop at the cap either way.
FORKED_KILLS, FORKED_MAX_RUNS = 100, 300
INSTALLED_KILLS, INSTALLED_MAX_RUNS = 4, 20
CALIBRATION_RUNS = 2
RECALIBRATE = 20
MEMORIES = 20
CHEAP_KDF = crypto.KdfParams(salt=b"x" * crypto.SALT_BYTES, n=2**14)


@dataclass
class Tally:
    """What the runs of one kind did, and what the checks after them found."""

    runs: int = 0
    kills: int = 0  # landed while the command ran
    swapped: int = 0  # of those, after the key was swapped (the new passphrase works)
    late: int = 0  # runs that found the key changed by the request of a run killed before (sync only)
    problems: list[str] = field(default_factory=list)


def seed_account(storage: Storage) -> dict[str, str]:
    """An account under PASSPHRASES[0] holding MEMORIES memories; their texts by id."""
    store = MemoryStore.create(storage, PASSPHRASES[0], CHEAP_KDF)
    texts = {}
    for n in range(MEMORIES):
        saved = store.save(
            entity="user", text=f"memory {n} of the kills", category="note", tags=[], keywords=[]
        )
        texts[saved.id] = saved.text
    return texts


def check(storage: Storage, texts: dict[str, str], tally: Tally, when: str) -> tuple[int, str]:
    """The index of the one passphrase that opens the key (-1 if not one: a problem noted in `tally`).

    And the key's fingerprint, to tell whether the key changed since.
    """
    try:
        account = storage.load_account()
        assert account is not None
        keys = {}
        for index, passphrase in enumerate(PASSPHRASES):
            with suppress(crypto.WrongPassphraseError):
                keys[index] = crypto.unwrap_data_key(
                    passphrase, account.kdf, account.account_id, account.wrapped_data_key
                )
        seen = account.fingerprint()
        if len(keys) != 1:
            tally.problems.append(f"{when}: {len(keys)} passphrases unlock")
            return -1, seen
        [(index, key)] = keys.items()
        store = MemoryStore(storage, account.account_id, key)
        read = {memory.id: memory.text for memory in store.current()}
        if read != texts or store.unreadable_ids():
            tally.problems.append(f"{when}: memories missing, changed or unreadable")
        return index, seen
    finally:
        storage.close()


class Worker:
    """passphrase_worker.py, running: forks one command per run."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(WORKER), str(log)],
            env={**os.environ, **env},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def _ask(self, line: str, answer: str) -> int:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()
        got = self.process.stdout.readline().split()
        assert got[:1] == [answer], f"the worker answered {got!r} to {line!r}"
        return int(got[1])

    def run(self, current: int, delay: float | None) -> tuple[int, float]:
        """One command from PASSPHRASES[current], SIGKILLed `delay` s after its fork (None: not killed).

        Its exit code (-9 when the kill landed), and the seconds from fork to reaped.
        """
        pid = self._ask(f"run {current}", "pid")
        started = time.monotonic()
        if delay is not None:
            time.sleep(delay)
            # The child is not reaped before the worker is told to: its pid is its own.
            os.kill(pid, signal.SIGKILL)
        code = self._ask("reap", "exit")
        return code, time.monotonic() - started

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("quit\n")
        self.process.stdin.close()
        self.process.wait(timeout=60)


def kill_runs(
    tally: Tally,
    rng: random.Random,
    run: Callable[[int, float | None], tuple[int, float]],
    verify: Callable[[str], tuple[int, str]],
    log: Path,
    kills: int,
    max_runs: int,
) -> float:
    """Kill runs at random moments until `kills` landed (or `max_runs` ran); the last calibrated duration.

    Every RECALIBRATE-th run is not killed: the median of the last two of those
    is the duration the kills are spread over, so it follows the machine's load. A
    third of the kills aim at the end of a run (80-100 % of the duration), where the
    key is swapped and remembered: some land before the swap, some after, some miss.
    """
    current, seen = verify("before any run")
    durations: deque[float] = deque(maxlen=CALIBRATION_RUNS)
    while tally.kills < kills and tally.runs < max_runs and current >= 0:
        calibrating = len(durations) < CALIBRATION_RUNS or tally.runs % RECALIBRATE == 0
        delay = None
        if not calibrating:
            duration = statistics.median(durations)
            end = rng.random() < 1 / 3
            delay = rng.uniform(0.8 * duration, duration) if end else rng.uniform(0, duration)
        written = log.stat().st_size if log.exists() else 0
        code, seconds = run(current, delay)
        tally.runs += 1
        after, key = verify(f"run {tally.runs} (exit {code})")
        if calibrating:
            durations.append(seconds)
        if code == -signal.SIGKILL:
            tally.kills += 1
            tally.swapped += after == 1 - current
        elif code == 0 and after == 1 - current:
            pass
        elif code == 1 and key != seen and _late(log.read_bytes()[written:]):
            # A sync server may store the key of a run killed mid-request after the check
            # that followed that run; the next run then finds the key changed under it and
            # says so. Nothing else writes the key, and the check above holds for the new one.
            tally.late += 1
        else:
            output = log.read_bytes()[written:].decode(errors="replace").strip()
            tally.problems.append(
                f"run {tally.runs}: exit {code} without a kill, passphrase {after} unlocks: {output[-300:]}"
            )
        current, seen = after, key
    return statistics.median(durations)


def _late(output: bytes) -> bool:
    """Whether a command's output says the key changed under it (after its start, or before it read it)."""
    return b"was changed by another machine while this command ran" in output or (
        b"wrapped key changed since this machine last unlocked it" in output
    )


@contextmanager
def worker(env: dict[str, str], log: Path) -> Iterator[Worker]:
    running = Worker(env, log)
    try:
        yield running
    finally:
        running.close()


def machine(tmp_path: Path) -> dict[str, str]:
    """The environment every run shares: its own cache, no plugins."""
    return {
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "HOME": str(tmp_path / "home"),
        "SQUIRREL_MCP_PLUGINS": "",
    }


def forked_local(tmp_path: Path, rng: random.Random, tally: Tally) -> str:
    """The forked command on a local vault; the line for the notes."""
    vault = tmp_path / "vault.sqlite3"
    texts = seed_account(LocalVault(vault, create=True))
    env = {**machine(tmp_path), "SQUIRREL_VAULT": str(vault)}
    log = tmp_path / "stderr-forked.txt"
    with worker(env, log) as forked:
        duration = kill_runs(
            tally,
            rng,
            forked.run,
            lambda when: check(LocalVault(vault, create=False), texts, tally, when),
            log,
            FORKED_KILLS,
            FORKED_MAX_RUNS,
        )
    return (
        f"local: {tally.kills} kills ({tally.swapped} after the swap) in {tally.runs} runs "
        f"of ~{duration:.2f} s"
    )


def forked_sync(tmp_path: Path, rng: random.Random, tally: Tally) -> str:
    """The forked command against the reference sync server on SQLite; the line for the notes."""
    with start_sync_server(f"sqlite:///{tmp_path}/sync.sqlite3") as server:

        def remote() -> RemoteStorage:
            return RemoteStorage(server.url, server.api_key)

        texts = seed_account(remote())
        env = {**machine(tmp_path), "SQUIRREL_API_BASE_URL": server.url, "SQUIRREL_API_KEY": server.api_key}
        log = tmp_path / "stderr-forked.txt"
        with worker(env, log) as forked:
            duration = kill_runs(
                tally,
                rng,
                forked.run,
                lambda when: check(remote(), texts, tally, when),
                log,
                FORKED_KILLS,
                FORKED_MAX_RUNS,
            )
    return (
        f"sync server (SQLite): {tally.kills} kills ({tally.swapped} after the swap) in {tally.runs} "
        f"runs of ~{duration:.2f} s ({tally.late} found a killed run's key stored after its check)"
    )


def installed_command(tmp_path: Path, rng: random.Random, tally: Tally) -> str:
    """The installed command in its own process, at the default scrypt cost; the line for the notes."""
    vault = tmp_path / "vault.sqlite3"
    texts = seed_account(LocalVault(vault, create=True))
    env = {**machine(tmp_path), "SQUIRREL_VAULT": str(vault), "PATH": os.environ["PATH"]}
    log = tmp_path / "stderr-installed.txt"

    def command(current: int, delay: float | None) -> tuple[int, float]:
        passphrases = {
            "SQUIRREL_PASSPHRASE": PASSPHRASES[current],
            "SQUIRREL_NEW_PASSPHRASE": PASSPHRASES[1 - current],
        }
        begun = time.monotonic()
        with log.open("ab") as output:
            process = subprocess.Popen(
                [sys.executable, "-m", "squirrel_mcp", "passphrase"],
                env={**env, **passphrases},
                stdout=output,
                stderr=output,
            )
        try:
            process.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            process.kill()
        return process.wait(timeout=120), time.monotonic() - begun

    duration = kill_runs(
        tally,
        rng,
        command,
        lambda when: check(LocalVault(vault, create=False), texts, tally, when),
        log,
        INSTALLED_KILLS,
        INSTALLED_MAX_RUNS,
    )
    return (
        f"installed command, default scrypt cost: {tally.kills} kills ({tally.swapped} after the swap) "
        f"in {tally.runs} runs of ~{duration:.1f} s"
    )


def test_kills_during_a_passphrase_change_leave_exactly_one_passphrase(tmp_path: Path) -> None:
    print(f"seed {SEED} (SQUIRREL_TEST_SEED={SEED} replays it)")
    # The commands' output is scanned for them (stderr-*.txt in tmp_path, by tests/conftest.py).
    secrets_of_this_test().add(list(PASSPHRASES))
    rng = random.Random(SEED)
    started = time.monotonic()
    tallies = {kind: Tally() for kind in ("local", "sync", "installed")}
    notes = []
    for kind, runs in (("local", forked_local), ("sync", forked_sync), ("installed", installed_command)):
        (tmp_path / kind).mkdir()
        notes.append(runs(tmp_path / kind, rng, tallies[kind]))
    problems = [problem for tally in tallies.values() for problem in tally.problems]
    record(
        "crash-passphrase",
        runs=sum(tally.runs for tally in tallies.values()),
        faults_injected=sum(tally.kills for tally in tallies.values()),
        data_lost=len(problems),
        seconds=time.monotonic() - started,
        notes="; ".join(notes) + f"; seed {SEED}",
    )
    assert not problems, f"seed {SEED}: {problems[:20]}"
    # Only on the sync server can a killed run's write land after it died (its request in flight).
    assert tallies["local"].late == tallies["installed"].late == 0
    assert tallies["local"].kills >= FORKED_KILLS, f"seed {SEED}: too few kills landed"
    assert tallies["sync"].kills >= FORKED_KILLS, f"seed {SEED}: too few kills landed"
    assert tallies["installed"].kills >= INSTALLED_KILLS, f"seed {SEED}: too few kills landed"
