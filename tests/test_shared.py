"""One memory process per vault (SQUIRREL_MCP_SHARED=1): hosts' bridges, the real processes.

Each `Client` starts `squirrel-mcp` as a host does; with SQUIRREL_MCP_SHARED=1
that process is a bridge to the vault's one memory process, which the first
bridge starts. The channel's directory is a short one of the test's own
(XDG_RUNTIME_DIR), and every memory process a test started is killed at its end.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from squirrel_mcp.core.config import Config, location
from tests.conftest import PASSPHRASE, call, call_error, run_cli, secrets_of_this_test, server_params
from tests.shared_support import (
    WITHIN,
    channel_of,
    memory_process,
    memory_processes,
    shared_host_env,
    wait_until,
)
from tests.ui_support import FORM, form_body, post_form, running_ui

pytestmark = [pytest.mark.anyio, pytest.mark.process]


@pytest.fixture
def shared_env(vault_env: dict[str, str]) -> Iterator[dict[str, str]]:
    """vault_env for bridges, on a channel directory of this test; its processes killed after."""
    env = shared_host_env(vault_env)
    runtime = env["XDG_RUNTIME_DIR"]
    channel = channel_of(env)
    # The memory process's log is what its hosts' stderr shows: scanned for secrets too.
    secrets_of_this_test().stderr_files.append(channel.log_path)
    yield env
    for pid in memory_processes(env):
        os.kill(pid, signal.SIGKILL)
    shutil.rmtree(runtime, ignore_errors=True)


def stderr_of_last_host() -> list[str]:
    return secrets_of_this_test().stderr_files[-1].read_text(encoding="utf-8").strip().splitlines()


async def test_three_hosts_share_one_memory_process(shared_env: dict[str, str]) -> None:
    """Three hosts started together: one memory process; a save through one is found through the others."""
    clients: list[Client] = []
    found: dict[int, dict[str, Any]] = {}
    saved = anyio.Event()
    done = anyio.Event()

    async def host(number: int) -> None:
        async with Client(server_params(shared_env)) as client:
            clients.append(client)
            if number == 0:
                await call(
                    client, "save_memory", text="Ada keeps bees on the roof", entity="Ada", category="fact"
                )
                saved.set()
            else:
                await saved.wait()
                found[number] = await call(client, "search_memory", query="bees")
            if len(found) == 2:
                done.set()
            await done.wait()
            # Every host still connected: one memory process serves all three.
            assert len(memory_processes(shared_env)) == 1

    with anyio.fail_after(WITHIN):
        async with anyio.create_task_group() as hosts:
            for number in range(3):
                hosts.start_soon(host, number)
    for number in (1, 2):
        assert [hit["text"] for hit in found[number]["results"]] == ["Ada keeps bees on the roof"]
    assert len(clients) == 3


async def test_sharing_is_the_default_and_0_makes_a_server_of_its_own(shared_env: dict[str, str]) -> None:
    """A host's config without SQUIRREL_MCP_SHARED: a bridge; with 0: a server of its own."""
    default = {name: value for name, value in shared_env.items() if name != "SQUIRREL_MCP_SHARED"}
    default["SQUIRREL_MCP_SHARED_IDLE"] = "0"
    # StdioServerParameters as a host's config gives them: the suite's mode does not apply here.
    command = [sys.executable, "-m", "squirrel_mcp"]
    secrets_of_this_test().add_env(default)
    async with Client(StdioServerParameters(command=command[0], args=command[1:], env=default)) as client:
        await call(client, "save_memory", text="Ada keeps bees on the roof", entity="Ada", category="fact")
        assert len(memory_processes(default)) == 1
    alone = {**default, "SQUIRREL_MCP_SHARED": "0"}
    wait_until(lambda: not memory_processes(default), "the idle memory process ends")
    async with Client(StdioServerParameters(command=command[0], args=command[1:], env=alone)) as client:
        found = await call(client, "search_memory", query="bees")
        assert memory_processes(alone) == []
    assert [hit["text"] for hit in found["results"]] == ["Ada keeps bees on the roof"]


async def test_a_host_with_other_settings_is_told_so_in_one_line(shared_env: dict[str, str]) -> None:
    async with Client(server_params(shared_env)) as first:
        await call(first, "get_context")
        other = {**shared_env, "SQUIRREL_MEMORY_EMBEDDINGS": "0"}
        async with Client(server_params(other)) as second:
            line = await call_error(second, "get_context")
            assert line == await call_error(second, "search_memory", query="anything")
        # The first host is served as before.
        await call(first, "get_context")
    assert "runs with other settings than this host's" in line
    assert "(SQUIRREL_MEMORY_EMBEDDINGS differs)" in line
    assert "SQUIRREL_MCP_SHARED=0" in line
    assert stderr_of_last_host() == [line]
    assert len(memory_processes(shared_env)) <= 1


async def test_a_host_with_another_passphrase_is_refused(shared_env: dict[str, str]) -> None:
    async with Client(server_params(shared_env)) as first:
        await call(first, "save_memory", text="Ada keeps bees on the roof", entity="Ada", category="fact")
        other = {**shared_env, "SQUIRREL_PASSPHRASE": "a different passphrase entirely"}
        async with Client(server_params(other)) as second:
            line = await call_error(second, "search_memory", query="bees")
    location_of_vault = location(Config.from_env(shared_env))
    assert line == (
        f"squirrel-mcp: this host's passphrase is not the one the memory process of {location_of_vault} "
        "was unlocked with; nothing was done: give every host of this vault the same passphrase, or set "
        "SQUIRREL_MCP_SHARED=0 in this host's config"
    )


async def test_a_passphrase_changed_while_the_process_serves_is_taken_and_the_old_one_refused(
    shared_env: dict[str, str],
) -> None:
    """`squirrel-mcp passphrase` beside a running memory process: hosts given the new one are served."""
    new = "the passphrase after the change"
    async with Client(server_params(shared_env)) as first:
        await call(first, "save_memory", text="Ada keeps bees on the roof", entity="Ada", category="fact")
        changed = run_cli({**shared_env, "SQUIRREL_NEW_PASSPHRASE": new}, "passphrase")
        assert changed.returncode == 0, changed.stderr
        process = memory_process(shared_env)
        renewed = {**shared_env, "SQUIRREL_PASSPHRASE": new}
        async with Client(server_params(renewed)) as second:
            found = await call(second, "search_memory", query="bees")
            assert memory_process(shared_env) == process
            # A host still given the old passphrase is refused now: it no longer opens the vault.
            async with Client(server_params(shared_env)) as third:
                line = await call_error(third, "get_context")
        # The host connected before the change is served on.
        await call(first, "get_context")
    assert [hit["text"] for hit in found["results"]] == ["Ada keeps bees on the roof"]
    assert "passphrase is not the one the memory process" in line


async def test_a_wrong_passphrase_does_not_keep_the_vault_from_the_right_one(
    shared_env: dict[str, str],
) -> None:
    """A process whose unlock failed stops listening at once: the next host starts a fresh one."""
    idle = {**shared_env, "SQUIRREL_MCP_SHARED_IDLE": "0"}
    async with Client(server_params(idle)) as first:
        await call(first, "save_memory", text="Ada keeps bees on the roof", entity="Ada", category="fact")
    wait_until(lambda: memory_process(idle) is None, "the idle memory process ends")
    wrong = {**idle, "SQUIRREL_PASSPHRASE": "not the passphrase at all"}
    async with Client(server_params(wrong)) as refused:
        refused_stderr = secrets_of_this_test().stderr_files[-1]
        line = await call_error(refused, "get_context")
        assert "the passphrase does not unlock this vault" in line
        # The refused host still connected: a host with the right passphrase is served.
        async with Client(server_params(idle)) as right:
            found = await call(right, "search_memory", query="bees")
        assert [hit["text"] for hit in found["results"]] == ["Ada keeps bees on the roof"]
        assert line == await call_error(refused, "get_context")
    # The memory process's line, on the refused host's stderr as a server of its own prints it.
    assert refused_stderr.read_text(encoding="utf-8").splitlines() == [line]


async def test_the_memory_process_ends_when_idle_and_the_next_host_starts_one(
    shared_env: dict[str, str],
) -> None:
    idle = {**shared_env, "SQUIRREL_MCP_SHARED_IDLE": "1"}
    async with Client(server_params(idle)) as client:
        await call(client, "save_memory", text="Ada keeps bees on the roof", entity="Ada", category="fact")
        first = memory_process(idle)
        assert first is not None
    wait_until(lambda: memory_process(idle) is None, "the idle memory process ends")
    assert not channel_of(idle).socket_path.exists()
    async with Client(server_params(idle)) as client:
        found = await call(client, "search_memory", query="bees")
        assert memory_process(idle) not in (None, first)
    assert [hit["text"] for hit in found["results"]] == ["Ada keeps bees on the roof"]


async def test_a_kill_9_loses_no_acknowledged_save_and_every_call_is_answered(
    shared_env: dict[str, str],
) -> None:
    """50 mixed calls from two hosts, the memory process killed (-9) among them."""
    acknowledged: list[str] = []
    answers = {"result": 0, "error": 0}
    pids: set[int] = set()
    killed = anyio.Event()

    async def host(number: int) -> None:
        async with Client(server_params(shared_env)) as client:
            await call(client, "get_context")
            for index in range(25):
                if number == 0 and index == 8:
                    pid = memory_process(shared_env)
                    assert pid is not None
                    pids.add(pid)
                    os.kill(pid, signal.SIGKILL)
                    killed.set()
                if index % 2 == 0:
                    text = f"host {number} note {index}: the heron nests by the weir"
                    secrets_of_this_test().add(text)
                    result = await client.call_tool(
                        "save_memory", {"text": text, "entity": f"Weir {number}", "category": "fact"}
                    )
                    if not result.is_error:
                        acknowledged.append(text)
                else:
                    result = await client.call_tool("search_memory", {"query": "heron"})
                answers["error" if result.is_error else "result"] += 1
                if number == 1 and index == 4:
                    await killed.wait()

    with anyio.fail_after(WITHIN):
        async with anyio.create_task_group() as hosts:
            hosts.start_soon(host, 0)
            hosts.start_soon(host, 1)
    assert answers["result"] + answers["error"] == 50
    async with Client(server_params(shared_env)) as client:
        listed = await call(client, "list_memories", limit=100)
        after = memory_process(shared_env)
    assert after is not None and after not in pids
    kept = {memory["text"] for memory in listed["memories"]}
    assert set(acknowledged) <= kept
    assert answers["result"] >= 40, answers


NOBODY = 65534
CONNECT = """
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect(sys.argv[1])
except PermissionError:
    print("refused at the directory")
    raise SystemExit(0)
s.settimeout(30)
try:
    s.sendall(b'{"squirrel-mcp": 1, "identity": "x", "settings": {}, "passphrase": null}\\n')
    answer = s.recv(1024)
except (ConnectionResetError, BrokenPipeError):
    answer = b""
print(repr(answer) if answer else "closed without an answer")
"""


@pytest.mark.skipif(
    os.getuid() != 0 or shutil.which("setpriv") is None or not Path("/usr/bin/python3").exists(),
    reason="needs root, setpriv and /usr/bin/python3",
)
async def test_another_user_cannot_connect(shared_env: dict[str, str]) -> None:
    async with Client(server_params(shared_env)) as client:
        await call(client, "get_context")
        channel = channel_of(shared_env)

        def as_nobody() -> str:
            # The system's Python: one every user may run (a virtual environment's may not be).
            python = "/usr/bin/python3"
            command = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
            done = subprocess.run(
                [*command, python, "-I", "-c", CONNECT, str(channel.socket_path)],
                capture_output=True,
                timeout=60,
                check=True,
            )
            return done.stdout.decode().strip()

        assert as_nobody() == "refused at the directory"
        # Opened up by hand (a mistake, say): the memory process still checks who connects.
        runtime = Path(shared_env["XDG_RUNTIME_DIR"])
        for directory in (runtime, channel.directory):
            directory.chmod(0o755)
        channel.socket_path.chmod(0o777)
        try:
            assert as_nobody() == "closed without an answer"
        finally:
            for directory in (runtime, channel.directory):
                directory.chmod(0o700)
            channel.socket_path.chmod(0o600)
        # Still serving this user.
        await call(client, "get_context")
    log = channel.log_path.read_text(encoding="utf-8")
    assert f"a connection from another user (uid {NOBODY}) was refused" in log


async def test_a_bad_sharing_setting_is_told_on_every_call(shared_env: dict[str, str]) -> None:
    for variable, value, expected in [
        ("SQUIRREL_MCP_SHARED", "yes", "SQUIRREL_MCP_SHARED must be 1"),
        ("SQUIRREL_MCP_SHARED_IDLE", "soon", "SQUIRREL_MCP_SHARED_IDLE must be a number of seconds"),
        ("SQUIRREL_MCP_SHARED_IDLE", "-1", "SQUIRREL_MCP_SHARED_IDLE must be a number of seconds"),
    ]:
        async with Client(server_params({**shared_env, variable: value})) as client:
            line = await call_error(client, "get_context")
        assert line.startswith(f"squirrel-mcp: {expected}"), line
        assert stderr_of_last_host() == [line]
    assert memory_processes(shared_env) == []


def listens_on(pid: int, port: int) -> bool:
    """Whether process `pid` holds the socket listening on 127.0.0.1:`port`."""
    held = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            held.add(os.readlink(fd))
    for row in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = row.split()
        local, state, inode = fields[1], fields[3], fields[9]
        if local == f"0100007F:{port:04X}" and state == "0A":  # 127.0.0.1, LISTEN
            return f"socket:[{inode}]" in held
    return False


def opened_files(pid: int) -> set[str]:
    found = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            found.add(os.readlink(fd))
    return found


async def test_the_page_of_squirrel_mcp_ui_is_served_by_the_running_memory_process(
    shared_env: dict[str, str], tmp_path: Path
) -> None:
    """`squirrel-mcp ui` beside a host: the host's memory process serves the page, on the same memories."""
    async with Client(server_params(shared_env)) as client:
        first = (await call(client, "save_memory", text="Ada keeps bees on the roof"))["memory"]["id"]
        serving = memory_process(shared_env)
        assert serving is not None
        with running_ui(shared_env, tmp_path) as ui:
            assert listens_on(serving, ui.port)
            assert memory_processes(shared_env) == [serving]
            # The command holds no vault: it opened no file of it.
            assert not any(
                name.startswith(shared_env["SQUIRREL_VAULT"]) for name in opened_files(ui.process.pid)
            )
            cookie = ui.login()
            await call(
                client, "save_memory", text="The hives of Ada face south", entity="Ada", category="fact"
            )
            status, _, page = ui.request("GET", "/", headers={"Cookie": cookie})
            assert status == 200
            assert "Ada keeps bees on the roof" in page and "The hives of Ada face south" in page
            # A delete on the page: the host's next search does not find it.
            form = {**FORM, "Cookie": cookie, "Origin": ui.origin}
            post_form(ui, f"/memory/{first}/delete", form, form_body(reason="moved"))
            found = await call(client, "search_memory", query="bees")
            assert [hit["text"] for hit in found["results"]] == []
            # A page asked with another passphrase is refused, in one line.
            wrong = run_cli({**shared_env, "SQUIRREL_PASSPHRASE": "a different passphrase entirely"}, "ui")
            assert wrong.returncode == 1 and wrong.stdout == b""
            refused = wrong.stderr.decode().strip().splitlines()
            assert len(refused) == 1 and "is not the one the memory process of" in refused[0], refused
        # The page stopped; the process serves its host on.
        assert memory_process(shared_env) == serving
        found = await call(client, "search_memory", query="hives")
    assert [hit["text"] for hit in found["results"]] == ["The hives of Ada face south"]


def test_the_hello_names_no_secret_and_the_socket_is_the_users_alone(
    shared_env: dict[str, str],
) -> None:
    """The channel's files are closed to others; nothing of the hello reaches the log."""
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    # A host that sends its handshake and closes its input: answered through the bridge all the same.
    done = subprocess.run(
        [sys.executable, "-m", "squirrel_mcp"],
        input=(json.dumps(initialize) + "\n").encode(),
        env={"PATH": os.environ["PATH"], **shared_env},
        capture_output=True,
        timeout=WITHIN,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[0])["result"]["serverInfo"]["name"] == "squirrel-mcp"
    channel = channel_of(shared_env)
    assert channel.directory.stat().st_mode & 0o777 == 0o700
    for path in (channel.lock_path, channel.log_path, channel.socket_path):
        assert path.stat().st_mode & 0o777 == 0o600
    assert PASSPHRASE not in channel.log_path.read_text(encoding="utf-8")
