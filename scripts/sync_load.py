"""The sync server's load test: many machines of many accounts through a load balancer, then checks.

`run_load` makes `accounts` accounts on the database (a key each, the account
created by its first machine), then runs `machines` clients per account, each a
thread with its own `RemoteStorage` (the project's remote storage, as
`squirrel-mcp` uses it: its retries, its check of a retried append) through
haproxy in front of the instances (scripts/sync_cluster.py). Each machine, until
time is up, in an order drawn from a seeded generator:

- appends a batch of new memories (1 to 20 records);
- corrects one of its account's shared memories, which every machine of the
  account corrects too: the next revision after the highest it has pulled, so
  two machines often send the same revision at once; the loser gets 409
  (RevisionConflict), pulls and sends its correction again, up to
  MAX_CONFLICT_TRIES times;
- pulls what is new, extending its hash chain of the log (book/checkpoint.py's
  LogChain) pull after pull.

Mid-run, when asked, every instance is restarted in turn (SIGTERM: it drains,
finishes what is in flight, exits; then starts again). At the end each machine
pulls once more, and the checks read the database directly:

- lost: acknowledged records that are not stored with their ciphertext;
- duplicates: (slot, memory, revision) stored more than once, and gaps or
  repeats in a slot's sequence numbers;
- chain mismatches: machines whose chain (built pull by pull during the run)
  differs from the chain over the slot's log in the database;
- unresolved conflicts: corrections that got 409 and never landed;
- failed operations: operations that ended in an error after the client's retries.
"""

from __future__ import annotations

import hashlib
import os
import random
import statistics
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sync_cluster import Cluster, Stop

from squirrel_mcp.book.checkpoint import LogChain
from squirrel_mcp.keys.crypto import KdfParams
from squirrel_mcp.storage import Account, RevisionConflict, SealedRecord, StorageError
from squirrel_mcp.storage.remote import RemoteStorage
from squirrel_mcp.syncserver import keys
from squirrel_mcp.syncserver.database import Database, StoredRecord

RECORD_BYTES = 400
SHARED_MEMORIES = 3
MAX_BATCH = 20
MAX_CONFLICT_TRIES = 20


@dataclass
class Tally:
    """What one machine did and saw."""

    acknowledged: dict[tuple[str, int], bytes] = field(default_factory=dict)  # -> sha256 of ciphertext
    append_ms: list[float] = field(default_factory=list)
    pull_ms: list[float] = field(default_factory=list)
    conflicts: int = 0
    unresolved: int = 0
    failures: list[str] = field(default_factory=list)


@dataclass
class LoadResult:
    """The run's figures and the checks' counts."""

    instances: int
    accounts: int
    machines: int
    seconds: float
    appended: int
    append_ms: list[float]
    pull_ms: list[float]
    conflicts: int
    unresolved: int
    failures: list[str]
    lost: int
    duplicates: int
    chain_mismatches: int
    stored: int
    stops: list[Stop]

    @property
    def ok(self) -> bool:
        """True when every check passed."""
        clean_stops = all(stop.drained for stop in self.stops)
        return (
            not (self.lost or self.duplicates or self.chain_mismatches or self.unresolved or self.failures)
            and clean_stops
        )


class Machine:
    """One client machine of an account: its storage, its view of the log, its tally."""

    def __init__(self, url: str, key: str, account_id: str, name: str, seed: int) -> None:
        self.storage = RemoteStorage(url, key)
        self.account_id = account_id
        self.name = name
        self.random = random.Random(seed)
        self.chain = LogChain(account_id)
        self.cursor = 0
        self.highest: dict[str, int] = {}
        self.tally = Tally()
        self.made = 0

    def pull(self) -> None:
        """Pull what is new; extend the chain and the highest revisions seen."""
        start = time.perf_counter()
        records, self.cursor = self.storage.changes_since(self.cursor)
        self.tally.pull_ms.append((time.perf_counter() - start) * 1000)
        self.chain.extend(records)
        for record in records:
            self.highest[record.memory_id] = max(self.highest.get(record.memory_id, 0), record.revision)

    def append(self, records: list[SealedRecord]) -> None:
        """Append; every record counts as acknowledged once the call returns."""
        start = time.perf_counter()
        self.storage.append(records)
        self.tally.append_ms.append((time.perf_counter() - start) * 1000)
        for record in records:
            self.tally.acknowledged[(record.memory_id, record.revision)] = hashlib.sha256(
                record.ciphertext
            ).digest()

    def new_memories(self) -> None:
        """A batch of new memories, revision 1 each."""
        batch = []
        for _ in range(self.random.randint(1, MAX_BATCH)):
            self.made += 1
            memory_id = hashlib.sha256(f"{self.name}/{self.made}".encode()).hexdigest()[:16]
            batch.append(SealedRecord(memory_id, 1, os.urandom(RECORD_BYTES)))
        self.append(batch)

    def correct(self, shared: list[str]) -> None:
        """Correct a shared memory; on 409 pull and try again (the conflict resolved), within bounds."""
        memory_id = self.random.choice(shared)
        for _ in range(MAX_CONFLICT_TRIES):
            revision = self.highest.get(memory_id, 0) + 1
            try:
                self.append([SealedRecord(memory_id, revision, os.urandom(RECORD_BYTES))])
                return
            except RevisionConflict:
                self.tally.conflicts += 1
                self.pull()
        self.tally.unresolved += 1

    def run(self, shared: list[str], until: float, restarted: threading.Event) -> None:
        """Work until `until` (time.monotonic()) and the restart is over; an error is tallied, and ends it."""
        try:
            while time.monotonic() < until or not restarted.is_set():
                roll = self.random.random()
                if roll < 0.4:
                    self.new_memories()
                elif roll < 0.7:
                    self.correct(shared)
                else:
                    self.pull()
        # Any error is a failure of the run: counted and shown, never lost with its thread.
        except Exception as error:
            self.tally.failures.append(f"{self.name}: {type(error).__name__}: {error}")

    def finish(self) -> None:
        """The last pull, once every machine has stopped writing; then close."""
        try:
            self.pull()
        except StorageError as error:
            self.tally.failures.append(f"{self.name} (last pull): {error}")
        finally:
            self.storage.close()


def make_accounts(database_url: str, count: int) -> list[str]:
    """`count` new API keys, each opening a new empty slot, made as `issue-key` makes them."""
    database = Database(database_url)
    try:
        made = []
        for _ in range(count):
            key = keys.new_key()
            database.add_slot(keys.key_hash(key), keys.display_prefix(key))
            made.append(key)
        return made
    finally:
        database.close()


def _start_account(url: str, key: str, number: int) -> tuple[str, list[str]]:
    """Create the account (as its first machine's `init` would) and its shared memories; (id, shared)."""
    account_id = hashlib.sha256(f"account/{number}/{key}".encode()).hexdigest()[:32]
    kdf = KdfParams(salt=os.urandom(16), n=2**15, r=8, p=1)
    storage = RemoteStorage(url, key)
    try:
        storage.create_account(Account(account_id, kdf, os.urandom(61)))
        shared = [
            hashlib.sha256(f"{account_id}/shared/{i}".encode()).hexdigest()[:16]
            for i in range(SHARED_MEMORIES)
        ]
        storage.append([SealedRecord(memory_id, 1, os.urandom(RECORD_BYTES)) for memory_id in shared])
    finally:
        storage.close()
    return account_id, shared


def run_load(
    database_url: str,
    workdir: Path,
    *,
    instances: int,
    seconds: float,
    accounts: int = 10,
    machines: int = 3,
    restart: int = 0,
    seed: int = 48,
) -> LoadResult:
    """Run the load (module docstring) on a fresh database through `instances` instances; the result."""
    workdir.mkdir(parents=True, exist_ok=True)
    api_keys = make_accounts(database_url, accounts)
    with Cluster(database_url, instances, workdir) as cluster:
        started = [_start_account(cluster.url, key, number) for number, key in enumerate(api_keys)]
        crew: list[tuple[int, Machine, list[str]]] = []
        for number, (key, (account_id, shared)) in enumerate(zip(api_keys, started, strict=True)):
            for m in range(machines):
                machine = Machine(
                    cluster.url, key, account_id, f"a{number}m{m}", seed * 1000 + number * 10 + m
                )
                crew.append((number, machine, shared))
        began = time.monotonic()
        until = began + seconds
        # The load goes on until the restart is over too, so that all of it happens under load.
        restarted = threading.Event()
        problems: list[str] = []
        roll = threading.Thread(target=_roll, args=(cluster, restart, seconds * 0.3, restarted, problems))
        threads = [threading.Thread(target=m.run, args=(shared, until, restarted)) for _, m, shared in crew]
        for thread in [roll, *threads]:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.monotonic() - began
        roll.join()
        for _, machine, _ in crew:
            machine.finish()
        stops = list(cluster.stops)
    result = _check(database_url, crew, api_keys, instances, machines, elapsed, stops)
    result.failures.extend(problems)
    if len(stops) != restart:
        result.failures.append(f"{len(stops)} of {restart} instances were restarted")
    return result


def _roll(cluster: Cluster, count: int, after: float, done: threading.Event, problems: list[str]) -> None:
    """After `after` seconds, restart the first `count` instances one after another; then set `done`."""
    try:
        if count:
            time.sleep(after)
        for index in range(count):
            cluster.restart(index)
    # Any error is a failure of the run: counted and shown, never lost with its thread.
    except Exception as error:
        problems.append(f"the rolling restart failed: {type(error).__name__}: {error}")
    finally:
        done.set()


def _check(
    database_url: str,
    crew: list[tuple[int, Machine, list[str]]],
    api_keys: list[str],
    instances: int,
    machines: int,
    elapsed: float,
    stops: list[Stop],
) -> LoadResult:
    """Compare what the machines acknowledged and pulled with what the database holds."""
    logs = _read_logs(database_url, api_keys)
    lost = duplicates = mismatches = stored = 0
    for number, (log, _seq_ok) in enumerate(logs):
        stored += len(log)
        held = Counter((memory_id, revision) for memory_id, revision, _ in log)
        duplicates += sum(count - 1 for count in held.values() if count > 1)
        if not _seq_ok:
            duplicates += 1
        digests = {(m, r): hashlib.sha256(c).digest() for m, r, c in log}
        for n, machine, _ in crew:
            if n != number:
                continue
            for address, digest in machine.tally.acknowledged.items():
                if digests.get(address) != digest:
                    lost += 1
            server_chain = LogChain(machine.account_id)
            server_chain.extend(SealedRecord(m, r, c) for m, r, c in log)
            if server_chain.head != machine.chain.head:
                mismatches += 1
    tallies = [machine.tally for _, machine, _ in crew]
    return LoadResult(
        instances=instances,
        accounts=len(api_keys),
        machines=machines,
        seconds=elapsed,
        appended=sum(len(t.acknowledged) for t in tallies),
        append_ms=[ms for t in tallies for ms in t.append_ms],
        pull_ms=[ms for t in tallies for ms in t.pull_ms],
        conflicts=sum(t.conflicts for t in tallies),
        unresolved=sum(t.unresolved for t in tallies),
        failures=[f for t in tallies for f in t.failures],
        lost=lost,
        duplicates=duplicates,
        chain_mismatches=mismatches,
        stored=stored,
        stops=stops,
    )


def _read_logs(database_url: str, api_keys: list[str]) -> list[tuple[list[tuple[str, int, bytes]], bool]]:
    """Per key, its slot's records in log order, and whether their seqs run 1, 2, 3, ... without a gap."""
    database = Database(database_url)
    try:
        found = []
        for key in api_keys:
            slot = database.slot_for_key(keys.key_hash(key))
            assert slot is not None
            rows: list[StoredRecord] = []
            after, more = 0, True
            while more:
                page = database.changes(slot, after, 500, 4 * 2**20)
                rows.extend(page.records)
                after, more = page.cursor, page.more
            log = [(r.memory_id, r.revision, r.ciphertext) for r in rows]
            found.append((log, [r.seq for r in rows] == list(range(1, len(rows) + 1))))
        return found
    finally:
        database.close()


def percentile(values: list[float], share: float) -> float:
    """Nearest-rank percentile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, round(share * len(ordered)) - 1)]


def summary(result: LoadResult) -> dict[str, Any]:
    """The figures a report shows."""
    return {
        "records_per_s": result.appended / result.seconds,
        "append_p50": statistics.median(result.append_ms) if result.append_ms else 0.0,
        "append_p95": percentile(result.append_ms, 0.95),
        "pull_p50": statistics.median(result.pull_ms) if result.pull_ms else 0.0,
        "pull_p95": percentile(result.pull_ms, 0.95),
    }
