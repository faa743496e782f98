"""No network in local mode: the server with the embeddings plugin opens no connection.

Two independent proofs, in one run of the real server saving and searching with
the model loaded (hybrid):

- an audit hook (`sys.addaudithook`, installed by a sitecustomize on PYTHONPATH
  before anything else is imported) records every socket the process creates and
  every connect, bind, send and name lookup: none may concern an internet address
  (asyncio's own AF_UNIX socket pair, the event loop's wake-up line, is expected);
- the server runs in a network namespace of its own without interfaces
  (`unshare -n`, needs root): had it needed the network, it could not have worked.

A control run shows the hook does record a connection attempt.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.conftest import call, needs_model, server_params
from tests.reliability.figures import record

pytestmark = pytest.mark.anyio

AUDIT_LOG_VARIABLE = "NETWORK_AUDIT_LOG"
# Written to a folder put first on PYTHONPATH: Python imports it at start-up, before any other module.
SITECUSTOMIZE = """
import json, os, socket, sys

_log = open(os.environ["NETWORK_AUDIT_LOG"], "a", buffering=1)
_log.write(json.dumps({"event": "hook installed", "pid": os.getpid()}) + "\\n")
_WATCHED = {
    "socket.__new__", "socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg",
    "socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyaddr", "socket.getnameinfo",
    "http.client.connect", "urllib.Request",
}

def _hook(event, args):
    if event not in _WATCHED:
        return
    if event == "socket.__new__":
        args = (int(args[1]), int(args[2]))
    _log.write(json.dumps({"event": event, "args": [repr(a)[:200] for a in args]}) + "\\n")

sys.addaudithook(_hook)
"""
INTERNET = {int(socket.AF_INET), int(socket.AF_INET6)}
# How a Unix socket's repr names its family.
UNIX_SOCKET = f"family={int(socket.AF_UNIX)},"


def audit_env(tmp_path: Path, env: dict[str, str]) -> tuple[dict[str, str], Path]:
    site = tmp_path / "audit-site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    log = tmp_path / "network-audit.jsonl"
    return {**env, "PYTHONPATH": str(site), AUDIT_LOG_VARIABLE: str(log)}, log


def events(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def network_use(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events that touch the network: an internet socket made, or any connect, bind, send or lookup.

    Making an AF_UNIX socket is not: asyncio's wake-up pair comes from socketpair(),
    which neither binds nor connects. Nor is a Unix socket's bind or connect: the channel
    between a host's bridge and the vault's memory process, a file on this machine.
    """
    return [
        event
        for event in found
        if event["event"] != "hook installed"
        and not (event["event"] == "socket.__new__" and int(event["args"][0]) not in INTERNET)
        and not (event["event"] in ("socket.bind", "socket.connect") and UNIX_SOCKET in event["args"][0])
    ]


def test_the_hook_records_a_connection_attempt(tmp_path: Path) -> None:
    """Control: with the hook in place, a process that tries to connect is caught."""
    env, log = audit_env(tmp_path, {"PATH": os.environ["PATH"]})
    script = (
        "import socket\n"
        "try:\n    socket.create_connection(('127.0.0.1', 9), timeout=1)\n"
        "except OSError:\n    pass\n"
    )
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=60)
    found = events(log)
    assert found[0]["event"] == "hook installed"
    assert {"socket.getaddrinfo", "socket.connect"} <= {event["event"] for event in network_use(found)}


def namespace_works() -> bool:
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    return subprocess.run([unshare, "-n", "true"], capture_output=True, check=False).returncode == 0


@needs_model
async def test_the_server_opens_no_connection_in_local_mode(
    vault_env: dict[str, str], tmp_path: Path
) -> None:
    started = time.monotonic()
    env, log = audit_env(
        tmp_path,
        {**vault_env, "SQUIRREL_MCP_PLUGINS": "embeddings", "SQUIRREL_MEMORY_CACHE_DIR": str(tmp_path / "c")},
    )
    params = server_params(env)
    isolated = namespace_works()
    if isolated:
        unshare = shutil.which("unshare")
        assert unshare is not None
        wrapped = ["-n", params.command, *params.args]
        params = StdioServerParameters(command=unshare, args=wrapped, env=params.env)
    calls = 0
    async with Client(params) as client:
        for text in ("Is allergic to peanuts", "Sister Anna lives in Zürich", "Runs Pi-hole for DNS"):
            await call(client, "save_memory", text=text)
            calls += 1
        deadline = time.monotonic() + 60
        while True:
            found = await call(client, "search_memory", query="food allergy")
            calls += 1
            if found["ranking"] == "hybrid" or time.monotonic() > deadline:
                break
            await anyio.sleep(0.2)
        assert found["ranking"] == "hybrid", "the model never loaded"
        for query in ("where does my sister live", "ad blocking", "peanuts"):
            await call(client, "search_memory", query=query, nearMisses=True)
            calls += 1
    vectors_written = list((tmp_path / "c" / "squirrel-notes").glob("memory-vectors-*.bin"))
    assert vectors_written, "the plugin wrote its vector file"
    found_events = events(log)
    assert found_events and found_events[0]["event"] == "hook installed"
    sockets = [event for event in found_events if event["event"] == "socket.__new__"]
    assert network_use(found_events) == []
    record(
        "network-local-mode",
        runs=1,
        inputs_tried=calls,
        data_lost=0,
        seconds=time.monotonic() - started,
        notes=(
            f"the real server with the embeddings plugin (model loaded, hybrid search), {calls} tool calls, "
            f"vector file written: the audit hook saw {len(sockets)} socket(s) created, all AF_UNIX "
            "(asyncio's wake-up pair), and 0 internet sockets, connects, binds, sends or name lookups"
            + (
                "; run inside a network namespace without interfaces (unshare -n)"
                if isolated
                else "; unshare -n was not available, so only the audit hook proves it here"
            )
        ),
    )
