"""Where one append of 500 records goes inside the sync server: each stage on its own, in process.

Part of scripts/bench_sync.py (its docs/benchmarks/sync.md's stage table). The
server's own steps for one batch, each timed alone on this tree's code: decoding
and checking the JSON body against the contract (`json.loads`, then the wire
model, as the server does), turning it into storage records (base64 decoded),
and `Database.append` on a fresh database (one transaction: the slot's row
locked, the revisions checked, the rows stored, the commit). What the whole
request costs the server process beyond these is HTTP, the event loop and the
worker threads, and the key lookup: the CPU table beside this one has the whole.
"""

from __future__ import annotations

import json
import os
import secrets
import statistics
import time
from collections.abc import Callable
from typing import TypeVar

from squirrel_mcp.keys.crypto import KdfParams
from squirrel_mcp.storage import Account, wire
from squirrel_mcp.syncserver import keys, validation
from squirrel_mcp.syncserver.database import Database

_T = TypeVar("_T")


def _timed(call: Callable[..., _T], *args: object) -> tuple[_T, float, float]:
    """`call(*args)`'s result, its CPU milliseconds (this thread) and its wall-clock milliseconds."""
    cpu, wall = time.thread_time(), time.perf_counter()
    result = call(*args)
    return result, (time.thread_time() - cpu) * 1000, (time.perf_counter() - wall) * 1000


def _decode(body: bytes) -> wire.AppendRequest:
    # As the server decodes a body: UTF-8, then JSON, then the contract's model.
    return validation.request_body(wire.AppendRequest, json.loads(body.decode("utf-8")))


def stages(database_url: str, bodies: list[bytes]) -> dict[str, float]:
    """Medians over `bodies` (each an append of new memories) of each stage's milliseconds."""
    database = Database(database_url)
    try:
        slot = database.slot_of_key(database.add_slot(keys.key_hash(keys.new_key()), "bench"))
        kdf = KdfParams(salt=os.urandom(16), n=2**14)
        database.create_account(slot, Account(secrets.token_hex(16), kdf, os.urandom(61), None))
        times: dict[str, list[float]] = {}
        for body in bodies:
            new, cpu, _ = _timed(_decode, body)
            times.setdefault("decode_cpu", []).append(cpu)
            records, cpu, _ = _timed(new.sealed)
            times.setdefault("sealed_cpu", []).append(cpu)
            _, cpu, wall = _timed(database.append, slot, records)
            times.setdefault("append_cpu", []).append(cpu)
            times.setdefault("append_wall", []).append(wall)
    finally:
        database.close()
    return {stage: statistics.median(found) for stage, found in times.items()}


def stage_lines(found: dict[str, dict[str, float]], batches: int) -> list[str]:
    """The table of the stages, one row per database."""
    lines = [
        "",
        f"### Where one batch of 500 goes in the server (now; medians of {batches} batches, in process)",
        "",
        "| Database | Decode and check the JSON, CPU ms | To storage records (base64), CPU ms "
        "| Database.append, CPU ms of this process | Database.append, wall ms |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, figures in found.items():
        lines.append(
            f"| {name} | {figures['decode_cpu']:.1f} | {figures['sealed_cpu']:.1f} "
            f"| {figures['append_cpu']:.1f} | {figures['append_wall']:.1f} |"
        )
    lines += [
        "",
        "An append's wall time less this process's CPU time is, on SQLite, mostly its commit waiting",
        "for the disk (`synchronous=FULL`); on PostgreSQL, the database's own work and the round trips.",
    ]
    return lines
