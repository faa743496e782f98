"""How a host's bridge starts the vault's memory process: never with code of the host's folder.

The memory process holds the passphrase and every memory for every host: it must
import nothing from the folder a host runs in, yet read a relative path setting as
that folder's; a process that dies as it starts must not keep the host waiting; and
its log keeps the previous process's lines. Real bridges, memory processes and a
server of its own, through the `mcp` client; every process a test started is
killed by its pid at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from squirrel_mcp.cli.bridge import EARLY_ENDS
from squirrel_mcp.cli.starting import MAX_LOG
from squirrel_mcp.core.channel import Channel
from tests.conftest import PASSPHRASE, call, call_error, run_cli, secrets_of_this_test, server_params
from tests.shared_support import WITHIN, channel_of, memory_process, shared_host_env, wait_until
from tests.test_doctor import _doctor, _hosts, _write

pytestmark = [pytest.mark.anyio, pytest.mark.process]

MODULE = "squirrel_mcp.cli.memory_process"


def processes_on(runtime: str) -> list[int]:
    """The live memory processes of this test: those whose channel directory is `runtime`'s."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if MODULE.encode() in cmdline and f"XDG_RUNTIME_DIR={runtime}".encode() in environ and state != "Z":
            found.append(int(entry.name))
    return found


@pytest.fixture
def shared_env(vault_env: dict[str, str]) -> Iterator[dict[str, str]]:
    """vault_env for bridges on a channel directory of this test; every memory process of it killed after."""
    env = {**shared_host_env(vault_env), "SQUIRREL_MCP_SHARED_IDLE": "0"}
    channel = channel_of(env)
    # The memory process's log, both generations, is what its hosts' stderr shows: scanned too.
    secrets_of_this_test().stderr_files += [channel.log_path, previous_log(channel)]
    yield env
    for pid in processes_on(env["XDG_RUNTIME_DIR"]):
        os.kill(pid, signal.SIGKILL)
    shutil.rmtree(env["XDG_RUNTIME_DIR"], ignore_errors=True)


def previous_log(channel: Channel) -> Path:
    return channel.log_path.with_name(channel.log_path.name + ".1")


def host_stderr() -> str:
    """What the last host this test started wrote on its stderr."""
    return secrets_of_this_test().stderr_files[-1].read_text(encoding="utf-8")


def host(env: dict[str, str], folder: Path, command: list[str] | None = None) -> StdioServerParameters:
    """A host's server started in `folder`, by `command` (the installed script when None)."""
    secrets_of_this_test().add_env(env)
    script = Path(sysconfig.get_path("scripts")) / "squirrel-mcp"
    command = command or [str(script)]
    return StdioServerParameters(command=command[0], args=command[1:], env=env, cwd=folder)


def marking(marker: Path) -> str:
    """Python that leaves `marker` when it runs: the proof that a module was imported."""
    return f"import os\nos.close(os.open({str(marker)!r}, os.O_CREAT | os.O_WRONLY, 0o600))\n"


def project_folder(folder: Path, markers: Path) -> None:
    """A folder a host may be opened in: a `json.py`, a `random.py` and a plugin installed there."""
    folder.mkdir()
    markers.mkdir()
    (folder / "json.py").write_text(marking(markers / "json"), encoding="utf-8")
    (folder / "random.py").write_text(marking(markers / "random"), encoding="utf-8")
    (folder / "x_plugin.py").write_text(marking(markers / "x plugin"), encoding="utf-8")
    info = folder / "x-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: x\nVersion: 0.1\n", encoding="utf-8")
    (info / "entry_points.txt").write_text("[squirrel_mcp]\nx = x_plugin\n", encoding="utf-8")


@pytest.mark.parametrize("form", ["script", "python -P -m"])
async def test_a_host_in_a_folder_of_python_files_is_served_by_a_memory_process_that_imports_none(
    shared_env: dict[str, str], tmp_path: Path, form: str
) -> None:
    """A host opened in a project holding `json.py`, `random.py` and a plugin: none runs in the process."""
    folder, markers = tmp_path / "project", tmp_path / "markers"
    project_folder(folder, markers)
    # The plugin named, so that the memory process looks for it (a host's config may name it).
    env = {**shared_env, "SQUIRREL_MCP_PLUGINS": "x"}
    command = None if form == "script" else [sys.executable, "-P", "-m", "squirrel_mcp"]
    with anyio.fail_after(WITHIN):
        async with Client(host(env, folder, command)) as client:
            await call(
                client, "save_memory", text="Ada keeps bees on the roof", entity="Ada", category="fact"
            )
            [pid] = processes_on(env["XDG_RUNTIME_DIR"])
            assert pid == memory_process(env)  # the shared process, holding the vault's lock
            # It runs in the channel's directory, only the user's, not in the host's folder.
            assert Path(f"/proc/{pid}/cwd").resolve() == channel_of(env).directory.resolve()
            found = await call(client, "search_memory", query="bees")
    assert [hit["text"] for hit in found["results"]] == ["Ada keeps bees on the roof"]
    assert sorted(path.name for path in markers.iterdir()) == []


# Only the memory process trips on it: a start that fails as a broken install's would, each time.
DIES = """
import os, sys
if {module!r} in sys.orig_argv:
    with open({starts!r}, "a") as starts:
        starts.write("started\\n")
    sys.stderr.write("Traceback (most recent call last):\\n  (the test's sitecustomize)\\n")
    sys.stderr.write("RuntimeError: this memory process cannot start\\x1b[31m here\\n")
    sys.stderr.flush()
    os._exit(1)
"""


async def test_a_memory_process_that_dies_as_it_starts_leaves_the_host_served_on_its_own(
    shared_env: dict[str, str], tmp_path: Path
) -> None:
    """A few early ends, then the host is served by a server of its own, told the log's last line."""
    site, starts = tmp_path / "site", tmp_path / "starts.txt"
    site.mkdir()
    (site / "sitecustomize.py").write_text(DIES.format(module=MODULE, starts=str(starts)), encoding="utf-8")
    env = {**shared_env, "PYTHONPATH": str(site)}
    with anyio.fail_after(WITHIN):
        async with Client(server_params(env)) as client:
            await call(
                client, "save_memory", text="Ada keeps bees on the roof", entity="Ada", category="fact"
            )
            found = await call(client, "search_memory", query="bees")
    assert [hit["text"] for hit in found["results"]] == ["Ada keeps bees on the roof"]
    # Started EARLY_ENDS times, not every 50 ms until a deadline; none is left.
    assert starts.read_text(encoding="utf-8").splitlines() == ["started"] * EARLY_ENDS
    assert processes_on(env["XDG_RUNTIME_DIR"]) == []
    log = channel_of(env).log_path
    # One line: why, the log's last line quoted (its control characters replaced), and what follows;
    # then the server of its own's.
    assert host_stderr().splitlines()[:2] == [
        f"squirrel-mcp: the memory process ended as it started, {EARLY_ENDS} times; its log is {log}; "
        'the last line of its log: "RuntimeError: this memory process cannot start?[31m here": '
        "this host's server runs on its own",
        f"squirrel-mcp: created a new vault at {env['SQUIRREL_VAULT']}",
    ]


async def test_a_relative_vault_is_the_hosts_folders_and_a_relative_directory_is_told_apart(
    shared_env: dict[str, str], tmp_path: Path
) -> None:
    """Relative paths mean the host's folder, though the memory process runs in the channel's directory."""
    folder, other = tmp_path / "project", tmp_path / "elsewhere"
    folder.mkdir()
    other.mkdir()
    vault = folder / "notes" / "vault.sqlite3"
    relative = {**shared_env, "SQUIRREL_VAULT": "notes/vault.sqlite3", "SQUIRREL_MEMORY_MODEL_DIR": "model"}
    # Made first in the host's folder: a server makes no vault at a path SQUIRREL_VAULT names.
    assert run_cli(relative, "init", cwd=folder).returncode == 0
    with anyio.fail_after(WITHIN):
        async with Client(host(relative, folder)) as first:
            await call(first, "save_memory", text="Ada keeps bees on the roof", entity="Ada", category="fact")
            [pid] = processes_on(shared_env["XDG_RUNTIME_DIR"])
            assert Path(f"/proc/{pid}/cwd").resolve() == channel_of(shared_env).directory.resolve()
            assert vault.exists()
            # A second host in the same folder, the same relative settings: served by the same process.
            async with Client(host(relative, folder)) as second:
                found = await call(second, "search_memory", query="bees")
            # The same vault from another folder, but "model" there is another directory: refused.
            elsewhere = {**relative, "SQUIRREL_VAULT": str(vault)}
            async with Client(host(elsewhere, other)) as third:
                line = await call_error(third, "get_context")
            assert processes_on(shared_env["XDG_RUNTIME_DIR"]) == [pid]
    assert [hit["text"] for hit in found["results"]] == ["Ada keeps bees on the roof"]
    assert "other settings" in line and "SQUIRREL_MEMORY_MODEL_DIR" in line
    # Nor was the relative path read from the memory process's own directory, or another host's folder.
    assert not (channel_of(shared_env).directory / "notes").exists() and not (other / "notes").exists()


PREVIOUS = "Traceback's last line of the process before: it crashed"
PLUGIN_LINE = "squirrel-mcp: plugin absent named in SQUIRREL_MCP_PLUGINS is not loaded"


def grow_past_max(log: Path, last: str) -> None:
    """`log` made longer than MAX_LOG, ending with the line `last`, as a long-running process leaves it."""
    with log.open("a", encoding="utf-8") as out:
        out.write(("padding " * 12 + "\n") * (MAX_LOG // 96 + 1))
        out.write(last + "\n")


async def test_a_long_log_is_kept_as_one_previous_generation_and_hosts_follow_it(
    shared_env: dict[str, str],
) -> None:
    """Past MAX_LOG the next process keeps the log as NAME.log.1 (0600) instead of erasing it."""
    # Each memory process says one line as it starts: the plugin named is not installed.
    env = {**shared_env, "SQUIRREL_MCP_PLUGINS": "absent"}
    channel = channel_of(env)
    log, previous = channel.log_path, previous_log(channel)
    log.touch(mode=0o600)
    grow_past_max(log, PREVIOUS)
    with anyio.fail_after(WITHIN):
        async with Client(server_params(env)) as client:
            await call(client, "get_context")
            assert previous.read_text(encoding="utf-8").endswith(PREVIOUS + "\n")
            # A new log: this process's lines alone (the plugin's, then the new vault's).
            assert log.read_text(encoding="utf-8").splitlines()[0] == PLUGIN_LINE
            # The process runs long and logs much, then is killed: the next one keeps its log.
            first = memory_process(env)
            assert first is not None
            grow_past_max(log, "the last line of the first process")
            os.kill(first, signal.SIGKILL)
            # The bridge starts the next process once it has seen the end of the first: a call sent
            # before may be answered as lost (it may or may not have reached the dying process).
            wait_until(lambda: memory_process(env) not in (None, first), "the next memory process runs")
            await call(client, "get_context")
    assert previous.read_text(encoding="utf-8").endswith("the last line of the first process\n")
    assert PREVIOUS not in previous.read_text(encoding="utf-8")  # one generation is kept, not two
    assert log.read_text(encoding="utf-8").splitlines() == [PLUGIN_LINE]
    assert {path.stat().st_mode & 0o777 for path in (log, previous)} == {0o600}
    # The host was shown every line written while it was connected, across both starts.
    shown = host_stderr().splitlines()
    assert shown.count(PLUGIN_LINE) == 2
    assert "the last line of the first process" in shown and PREVIOUS not in shown
    assert "squirrel-mcp: the memory process ended; connecting to a new one" in shown


def test_the_python_form_init_prints_has_P_and_doctor_reads_it(vault_env: dict[str, str]) -> None:
    """A host runs the printed command in its own folder: `-P`, so Python imports nothing from there."""
    result = run_cli(vault_env, "init")
    assert result.returncode == 0, result.stderr
    out = result.stdout.decode()
    server = json.loads(out[out.index("{") :])["mcpServers"]["squirrel-notes"]
    assert (server["command"], server["args"]) == (sys.executable, ["-P", "-m", "squirrel_mcp"])
    home = Path(vault_env["HOME"])
    env = {"SQUIRREL_PASSPHRASE": PASSPHRASE, "SQUIRREL_VAULT": vault_env["SQUIRREL_VAULT"]}
    unlocks = f"its SQUIRREL_PASSPHRASE unlocks the vault at {vault_env['SQUIRREL_VAULT']}"
    servers = {
        "printed": {"command": server["command"], "args": server["args"], "env": env},
        "older": {"command": sys.executable, "args": ["-m", "squirrel_mcp"], "env": env},
    }
    cursor = _write(home / ".cursor" / "mcp.json", json.dumps({"mcpServers": servers}))
    _code, lines = _doctor(vault_env)
    printed, older = _hosts(lines)
    # Each line then says the entry's project (tests/test_doctor.py holds those words).
    assert printed.startswith(
        f'✓ host config: {cursor}, entry "printed": runs {sys.executable} (this installation); '
        f"{unlocks}; project: "
    )
    assert older.startswith(
        f'✗ host config: {cursor}, entry "older": runs {sys.executable} (this installation), without -P: '
        f"Python imports first from the folder a host starts it in; {unlocks}"
    )
    assert older.endswith(
        f'→ set "command" to {json.dumps(sys.executable)} and "args" to ["-P", "-m", "squirrel_mcp"], '
        "so that no `json.py` or plugin of that folder runs in it"
    )
