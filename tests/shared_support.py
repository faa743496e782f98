"""Helpers of the tests of the shared memory process: its channel, its pid, a host's env for it."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from squirrel_mcp.core.channel import Channel, holder
from squirrel_mcp.core.config import Config
from squirrel_mcp.core.hello import identity

# A backstop against a hang: how long a test waits for a process to start or end.
WITHIN = 120.0


def shared_host_env(vault_env: dict[str, str], runtime: str | None = None) -> dict[str, str]:
    """vault_env for a host's bridge, on a short channel directory of its own (`runtime` if given).

    The cache directory is part of the channel's name: named, so that the test process
    (whose own XDG_CACHE_HOME is not the servers') finds the same channel.
    """
    return {
        **vault_env,
        "SQUIRREL_MCP_SHARED": "1",
        "XDG_RUNTIME_DIR": runtime or tempfile.mkdtemp(prefix="sq-run-"),
        "SQUIRREL_MEMORY_CACHE_DIR": vault_env.get("SQUIRREL_MEMORY_CACHE_DIR")
        or vault_env["XDG_CACHE_HOME"],
    }


def channel_of(env: dict[str, str]) -> Channel:
    return Channel.of(identity(Config.from_env(env)), env)


def memory_process(env: dict[str, str]) -> int | None:
    """The pid of the vault's running memory process (from its lock), None when none runs."""
    pid = holder(channel_of(env).lock_path)
    if pid is None:
        return None
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None
    return None if state == "Z" else pid


def memory_processes(env: dict[str, str]) -> list[int]:
    """Every live process running the memory process for this test's vault."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        vault = f"SQUIRREL_VAULT={env['SQUIRREL_VAULT']}".encode()
        if b"squirrel_mcp.cli.memory_process" in cmdline and vault in environ and state != "Z":
            found.append(int(entry.name))
    return found


def wait_until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + WITHIN
    while not condition():
        assert time.monotonic() < deadline, f"not within {WITHIN:g} s: {what}"
        time.sleep(0.05)
