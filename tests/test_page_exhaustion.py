"""The page inside the memory process: no flood of connections ends the process or fills its log.

While `squirrel-mcp ui` runs, the vault's memory process serves the page on a
loopback port any local user can reach, beside every host's session. Each
test starts its first host with a low limit on open files (the bridge passes
its own limits to the memory process it starts), so that exhausting them takes
a few hundred connections; the real bridges, memory process, `squirrel-mcp ui`
and the page over TCP do the rest.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.conftest import call, secrets_of_this_test, server_params
from tests.shared_support import channel_of, memory_process, memory_processes, shared_host_env, wait_until
from tests.ui_support import running_ui

pytestmark = [pytest.mark.anyio, pytest.mark.process]

# The memory process's limit on open files in these tests (soft and hard: it cannot raise it).
FILE_LIMIT = 256
# The most the memory process's log may hold after a test: a few dozen short lines.
LOG_BOUND = 16 * 1024
# Connections opened at once; the next batch waits until these are taken or refused.
BATCH = 32
# Seconds the tests hold a flood of failing accepts before they end it (not a measure: the
# assertions hold for any duration).
FLOOD_HELD = 3.0
# The host's server, its limits on open files set first (in Python: no prlimit needed).
WITH_LIMIT = (
    "import os, resource, sys; "
    "resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), int(sys.argv[2]))); "
    "os.execv(sys.executable, [sys.executable, '-m', 'squirrel_mcp'])"
)


@pytest.fixture
def shared_env(vault_env: dict[str, str]) -> Iterator[dict[str, str]]:
    """vault_env for bridges, on a channel directory of this test; its processes killed after."""
    env = shared_host_env(vault_env)
    secrets_of_this_test().stderr_files.append(channel_of(env).log_path)
    yield env
    for pid in memory_processes(env):
        os.kill(pid, signal.SIGKILL)
    shutil.rmtree(env["XDG_RUNTIME_DIR"], ignore_errors=True)


def limited(env: dict[str, str], soft: int, hard: int) -> StdioServerParameters:
    """A host's server (a bridge) started with these limits on open files, which it passes on."""
    params = server_params(env)
    return StdioServerParameters(
        command=sys.executable, args=["-c", WITH_LIMIT, str(soft), str(hard)], env=params.env
    )


def exhausted(pid: int) -> bool:
    """Whether process `pid` holds as many open files as FILE_LIMIT allows (its accepts fail)."""
    return len(os.listdir(f"/proc/{pid}/fd")) >= FILE_LIMIT


def file_limits(pid: int) -> tuple[int, int]:
    """The soft and hard limits on open files of process `pid`."""
    for row in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if row.startswith("Max open files"):
            soft, hard = row.split()[3:5]
            return int(soft), int(hard)
    raise AssertionError("no limit on open files listed")


def waiting_at(port: int) -> int:
    """How many connections wait to be accepted at the socket listening on 127.0.0.1:`port`."""
    for row in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = row.split()
        if fields[1] == f"0100007F:{port:04X}" and fields[3] == "0A":  # LISTEN
            return int(fields[4].split(":")[1], 16)
    return 0


def settled(connections: list[socket.socket]) -> bool:
    """Whether every connection's handshake is over (taken, or refused or reset by the page)."""
    poll = select.poll()
    for connection in connections:
        poll.register(connection, select.POLLOUT)
    return len(poll.poll(0)) == len(connections)


def flood(port: int, count: int, pid: int) -> list[socket.socket]:
    """`count` idle connections to the page, opened BATCH at a time; they are the caller's to close.

    Each batch waits until the page has taken or refused its connections, or the process
    `pid` can take none any more: so the flood has reached the process before this
    returns, whatever the machine's load.
    """
    held: list[socket.socket] = []
    while len(held) < count:
        batch = []
        for _ in range(min(BATCH, count - len(held))):
            connection = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            connection.setblocking(False)
            connection.connect_ex(("127.0.0.1", port))
            batch.append(connection)
        held += batch
        wait_until(
            lambda batch=batch: exhausted(pid) or (settled(batch) and waiting_at(port) == 0),
            "the page takes or refuses the connections",
        )
    return held


def close_all(connections: list[socket.socket]) -> None:
    for connection in connections:
        connection.close()


async def test_idle_connections_to_the_page_leave_the_memory_process_serving_every_host(
    shared_env: dict[str, str], tmp_path: Path
) -> None:
    """Hundreds of idle connections to the page: the same process serves a new host; the log stays small."""
    async with Client(limited(shared_env, FILE_LIMIT, FILE_LIMIT)) as first:
        await call(first, "save_memory", text="Ada keeps bees on the roof", entity="Ada", category="fact")
        serving = memory_process(shared_env)
        assert serving is not None
        assert file_limits(serving) == (FILE_LIMIT, FILE_LIMIT)
        with running_ui(shared_env, tmp_path) as ui:
            held = flood(ui.port, FILE_LIMIT + 100, serving)
            try:
                # A host started now, while the connections are held: the same process serves it.
                async with Client(server_params(shared_env)) as second:
                    found = await call(second, "search_memory", query="bees")
                    assert memory_process(shared_env) == serving
                await call(first, "get_context")
                # The page itself still answers a browser.
                cookie = ui.login()
                status, _, page = ui.request("GET", "/", headers={"Cookie": cookie})
                assert status == 200 and "Ada keeps bees on the roof" in page
            finally:
                close_all(held)
        assert memory_process(shared_env) == serving
    assert [hit["text"] for hit in found["results"]] == ["Ada keeps bees on the roof"]
    assert channel_of(shared_env).log_path.stat().st_size < LOG_BOUND


def unix_flood(path: Path, pid: int) -> list[socket.socket]:
    """Connections to the memory process's socket that never say their hello, until `pid` is exhausted.

    Each one it takes holds a descriptor until HELLO_WAIT. They are the caller's to close.
    """
    held: list[socket.socket] = []

    def more() -> bool:
        while not exhausted(pid):
            connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            connection.setblocking(False)
            try:
                connection.connect(str(path))
            except BlockingIOError:
                connection.close()
                return False  # the socket's queue is full: wait until the process takes some
            held.append(connection)
        return True

    wait_until(more, "the memory process has no descriptor left")
    return held


async def test_a_flood_of_failing_accepts_leaves_a_line_of_each_and_every_host_served(
    shared_env: dict[str, str], tmp_path: Path
) -> None:
    """Out of descriptors, both accept loops fail on and on: a line each, and the process serves on.

    The memory process's own (bridges) and asyncio's in the page's thread, which logs
    through the library's logger.
    """
    log = channel_of(shared_env).log_path
    async with Client(limited(shared_env, FILE_LIMIT, FILE_LIMIT)) as first:
        await call(first, "save_memory", text="Ada keeps bees on the roof", entity="Ada", category="fact")
        serving = memory_process(shared_env)
        assert serving is not None
        with running_ui(shared_env, tmp_path) as ui:
            # Connections to the memory process that never say their hello: each one taken
            # holds a descriptor until HELLO_WAIT, so the rest wait and every accept fails.
            held = unix_flood(channel_of(shared_env).socket_path, serving)
            held += flood(ui.port, BATCH, serving)
            try:

                def failing() -> bool:
                    text = log.read_text(encoding="utf-8")
                    said = "could not be accepted" in text and "out of system resource" in text
                    return said or memory_process(shared_env) != serving

                wait_until(failing, "both accept loops fail")
                assert memory_process(shared_env) == serving
                await anyio.sleep(FLOOD_HELD)
            finally:
                close_all(held)
            async with Client(server_params(shared_env)) as second:
                found = await call(second, "search_memory", query="bees")
                assert memory_process(shared_env) == serving
            await call(first, "get_context")
            cookie = ui.login()
            assert ui.request("GET", "/", headers={"Cookie": cookie})[0] == 200
    assert [hit["text"] for hit in found["results"]] == ["Ada keeps bees on the roof"]
    lines = log.read_text(encoding="utf-8").splitlines()
    # One line each; a second (saying how many were left out) only if the flood outlasted a minute.
    assert 1 <= len([line for line in lines if "could not be accepted" in line]) <= 2, lines
    assert 1 <= len([line for line in lines if "out of system resource" in line]) <= 2, lines
    assert log.stat().st_size < LOG_BOUND
    assert not any("Traceback" in line for line in lines), lines


async def test_the_memory_process_raises_its_soft_limit_on_open_files_to_the_hard_one(
    shared_env: dict[str, str],
) -> None:
    async with Client(limited(shared_env, 128, 4096)) as client:
        await call(client, "get_context")
        serving = memory_process(shared_env)
        assert serving is not None
        assert file_limits(serving) == (4096, 4096)
