"""Helpers of the reliability checks: cheap vaults, server processes, their memory use.

These checks run under `nox -s reliability` (and at the end of `nox -s tests`), never in
the plain `pytest` run: pyproject's `norecursedirs` leaves this folder out unless it is
named on the command line.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.keys import crypto
from squirrel_mcp.storage.local import LocalVault
from tests.conftest import PASSPHRASE

# The cheapest scrypt a vault may carry: every server start and every reopen after a
# kill unlocks the vault, and 0.3 s of the default KDF each time would be most of a run.
CHEAP_KDF = crypto.KdfParams(salt=b"r" * crypto.SALT_BYTES, n=2**14)


def create_vault(path: Path) -> None:
    """A new vault at `path` with the test passphrase and the cheap KDF."""
    vault = LocalVault(path, create=True)
    try:
        MemoryStore.create(vault, PASSPHRASE, CHEAP_KDF)
    finally:
        vault.close()


def open_vault(path: Path) -> MemoryStore:
    """Unlock the existing vault at `path` (StorageError if it does not open)."""
    return MemoryStore.unlock(LocalVault(path, create=False), PASSPHRASE)


@pytest.fixture
def cheap_vault_env(vault_env: dict[str, str]) -> dict[str, str]:
    """vault_env with its vault created beforehand under the cheap KDF."""
    create_vault(Path(vault_env["SQUIRREL_VAULT"]))
    return vault_env


def server_pids() -> list[int]:
    """Pids of this process's children that run squirrel_mcp (the servers an mcp Client started)."""
    me = str(os.getpid())
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        # The parent pid is the 2nd field after the parenthesised command name.
        parent = stat.rsplit(")", 1)[1].split()[1]
        if parent == me and b"squirrel_mcp" in cmdline:
            found.append(int(entry.name))
    return sorted(found)


def rss_kib(pid: int) -> int:
    """The resident set size of a process, in KiB (VmRSS of /proc/<pid>/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise LookupError(f"no VmRSS for {pid}")
