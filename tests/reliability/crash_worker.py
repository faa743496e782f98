"""The process test_crash.py kills: forks one child per run that writes to a vault until killed.

Started once per check (`python crash_worker.py`, SQUIRREL_PASSPHRASE set); it imports
everything up front and then forks a fresh child for each command read on stdin, so a
run costs a fork, not an interpreter start. The child drives the real code (LocalVault,
MemoryStore, and for `vectors` the plugin's Hybrid with its vector file) and reports on
stdout, one line each, written with a single os.write (atomic on a pipe):

    pid N          the child's pid (the test kills it with SIGKILL)
    ready          the vault is open; writes begin
    ack {...}      a write the real code returned from: it must survive the kill
    done | error X the child stopped by itself (a cap was reached, or a bug)

and the worker itself, once the child is gone: `exit N STATUS`.

Commands: `store VAULT SEED`, `vectors VAULT CACHE_DIR SEED`. Writes stop after a cap
either way, so a child that is never killed still ends.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.book.reader import MemoryReader
from squirrel_mcp.core.models import Revision
from squirrel_mcp.search.ranking import RankOptions
from squirrel_mcp.storage.local import LocalVault
from squirrel_mcp_embeddings import vectors
from squirrel_mcp_embeddings.ranker import Hybrid

MAX_STORE_OPS = 5_000
MAX_VECTOR_ROUNDS = 500
DIMENSIONS = 384
STAMP = vectors.Stamp("fake-embedder", "0" * 64, 1, DIMENSIONS)
WORDS = ["squirrel", "acorn", "winter", "cache", "oak", "pine", "nut", "forest", "river", "stone"]


def fake_vector(text: str) -> vectors.Matrix:
    """A unit vector determined by `text` alone, so the test can recompute any row."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
    row = np.random.default_rng(seed).standard_normal(DIMENSIONS).astype(np.float32)
    normed: vectors.Matrix = row / np.linalg.norm(row)
    return normed


class FakeEmbedder:
    """The Embeds protocol without a model: the file's writing is what is under test."""

    def embed(self, texts: Sequence[str]) -> vectors.Matrix:
        """One deterministic unit row per text."""
        return np.stack([fake_vector(text) for text in texts]).astype(np.float32)

    def fits(self, text: str) -> bool:
        """Always: the fake reads any text whole, so it has no passages."""
        return True

    def token_offsets(self, text: str) -> list[tuple[int, int]]:
        """Never called: a text that fits is not cut."""
        raise AssertionError("a text that fits is not cut")


def say(line: str) -> None:
    """One line to the test, in a single write."""
    os.write(1, (line + "\n").encode())


def memory_text(rng: random.Random, tag: str) -> str:
    """A memory text of random length (so records span one page or several)."""
    words = rng.choices(WORDS, k=rng.randint(3, 400))
    return f"{tag} " + " ".join(words)


def run_store(vault: Path, seed: int) -> None:
    """Save, correct, delete and restore memories in a loop, acknowledging each one that returned."""
    rng = random.Random(seed)
    store = MemoryStore.unlock(LocalVault(vault, create=False), os.environ["SQUIRREL_PASSPHRASE"])
    live = [m.id for m in store.current()]
    deleted = [m.id for m in store.current(include_deleted=True) if m.deleted]
    say("ready")
    for n in range(MAX_STORE_OPS):
        roll = rng.random()
        if not live or roll < 0.5:
            revision = store.save(
                entity="user", text=memory_text(rng, f"s{seed}n{n}"), category="note", tags=[], keywords=[]
            )
            live.append(revision.id)
        elif roll < 0.8:
            target = rng.choice(live)
            revision = store.update(
                target, changes={"text": memory_text(rng, f"u{seed}n{n}")}, reason="crash test"
            )
        elif roll < 0.9 or not deleted:
            target = live.pop(rng.randrange(len(live)))
            revision = store.delete(target, reason="crash test")
            deleted.append(target)
        else:
            target = deleted.pop(rng.randrange(len(deleted)))
            revision = store.restore(target)
            live.append(target)
        ack(revision)
    say("done")


def ack(revision: Revision) -> None:
    """Tell the test a write returned: which revision, with which text and state."""
    say("ack " + json.dumps([revision.id, revision.revision, revision.text, revision.deleted]))


def run_vectors(vault: Path, cache_dir: Path, seed: int) -> None:
    """Save memories, have the plugin embed them and write its vector file, in a loop."""
    rng = random.Random(seed)
    store = MemoryStore.unlock(LocalVault(vault, create=False), os.environ["SQUIRREL_PASSPHRASE"])
    reader = MemoryReader(store)
    path = vectors.vector_path(store.account_id, {vectors.CACHE_DIR_VARIABLE: str(cache_dir)})
    hybrid = Hybrid(
        FakeEmbedder(),
        reader,
        lambda line: say(f"notice {line}"),
        stamp=STAMP,
        floor=0.3,
        span=0.5,
        path=path,
    )
    store.listeners.append(hybrid.changed)
    options = RankOptions(limit=10, near_misses=False, category=None, tags=(), now=datetime.now(UTC))
    say("ready")
    for n in range(MAX_VECTOR_ROUNDS):
        for k in range(rng.randint(1, 40)):
            store.save(
                entity="user",
                text=memory_text(rng, f"v{seed}n{n}k{k}"),
                category="note",
                tags=[],
                keywords=[],
            )
        # A search embeds the new memories and has the saver thread write the file;
        # flush() then waits for that write (or makes it), as shutdown does.
        hybrid.rank("acorn", [], 0, options)
        hybrid.flush()
        say(f"ack {len(hybrid.table)}")
    say("done")


def child(command: list[str]) -> None:
    """Run one command in this (forked) process; never returns."""
    status = 0
    try:
        say(f"pid {os.getpid()}")
        if command[0] == "store":
            run_store(Path(command[1]), int(command[2]))
        elif command[0] == "vectors":
            run_vectors(Path(command[1]), Path(command[2]), int(command[3]))
        else:
            raise ValueError(f"unknown command {command[0]!r}")
    except BaseException as error:
        say(f"error {type(error).__name__}: {error}")
        status = 1
    # Straight out: the forked copy must not run the worker's loop or any atexit.
    os._exit(status)


def main() -> None:
    """Read commands; fork a child for each; report how each child ended."""
    for line in sys.stdin:
        command = line.split()
        if not command or command[0] == "quit":
            break
        pid = os.fork()
        if pid == 0:
            child(command)
        _, status = os.waitpid(pid, 0)
        say(f"exit {pid} {os.waitstatus_to_exitcode(status)}")


if __name__ == "__main__":
    main()
