"""The parts of the shared memory process that run in this interpreter: the hello, the channel's directory."""

from __future__ import annotations

import io
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from squirrel_mcp.cli.bridge import Relay
from squirrel_mcp.core.channel import (
    MAX_SOCKET_PATH,
    Channel,
    ChannelError,
    PeerRefused,
    check_peer,
    runtime_directory,
    try_lock,
)
from squirrel_mcp.core.config import (
    APP_NAME,
    Config,
    default_cache_dir,
    default_vault_path,
    linux_user_directory,
)
from squirrel_mcp.core.hello import (
    DEFAULT_IDLE,
    Hello,
    HelloError,
    PageRequest,
    answer,
    identity,
    idle_seconds,
    page_answer,
    read_answer,
    read_page_answer,
    refusal,
    settings,
)

PASSPHRASE = "correct horse battery staple"


def config(tmp_path: Path, **env: str) -> tuple[Config, dict[str, str]]:
    environment = {
        "SQUIRREL_VAULT": str(tmp_path / "vault.sqlite3"),
        "SQUIRREL_PASSPHRASE": PASSPHRASE,
        **env,
    }
    return Config.from_env(environment), environment


def hello(tmp_path: Path, **env: str) -> Hello:
    made, environment = config(tmp_path, **env)
    return Hello(identity(made), settings(made, environment), made.passphrase)


def test_the_same_settings_and_passphrase_are_taken(tmp_path: Path) -> None:
    assert refusal(hello(tmp_path), hello(tmp_path), "the vault") is None


def test_other_settings_are_named_without_their_values(tmp_path: Path) -> None:
    ours = hello(tmp_path, SQUIRREL_MCP_PLUGINS="")
    theirs = hello(tmp_path, SQUIRREL_MEMORY_EMBEDDINGS="0", SQUIRREL_MCP_PLUGINS="embeddings")
    line = refusal(ours, theirs, "the vault at X")
    assert line is not None
    assert "(SQUIRREL_MCP_PLUGINS, SQUIRREL_MEMORY_EMBEDDINGS differ)" in line
    assert "embeddings here" not in line and PASSPHRASE not in line


def test_only_the_settings_the_memory_process_reads_are_compared(tmp_path: Path) -> None:
    """A variable it does not read (a sync server's database URL) is neither compared nor sent."""
    database = "postgresql://squirrel:a-password@db.example.org/memories"
    ours = hello(tmp_path, SQUIRREL_SYNC_DATABASE=database, SQUIRREL_MEMORY_MODEL_DIR="/models")
    theirs = hello(tmp_path, SQUIRREL_SOMETHING_ELSE="1", SQUIRREL_MEMORY_MODEL_DIR="/models")
    assert refusal(ours, theirs, "the vault") is None
    assert database not in ours.line().decode()
    assert ours.settings["SQUIRREL_MEMORY_MODEL_DIR"] == "/models"


def test_the_sharing_variables_and_secrets_are_no_settings(tmp_path: Path) -> None:
    ours = hello(tmp_path)
    theirs = hello(tmp_path, SQUIRREL_MCP_SHARED_IDLE="5", SQUIRREL_NEW_PASSPHRASE="another one entirely")
    assert refusal(ours, theirs, "the vault") is None
    assert "SQUIRREL_PASSPHRASE" not in ours.settings


def test_another_passphrase_or_none_is_refused(tmp_path: Path) -> None:
    ours = hello(tmp_path)
    for other in ("a different passphrase", None):
        theirs = Hello(ours.identity, ours.settings, other)
        line = refusal(ours, theirs, "the vault at X")
        assert line is not None and "this host's passphrase is not the one" in line
        assert PASSPHRASE not in line and "different" not in line


def test_another_vault_is_refused(tmp_path: Path) -> None:
    ours = hello(tmp_path)
    theirs = hello(tmp_path / "elsewhere")
    line = refusal(ours, theirs, "the vault at X")
    assert line is not None and "another vault" in line


def test_a_sync_account_is_told_apart_by_its_key_without_holding_it(tmp_path: Path) -> None:
    one, _ = config(
        tmp_path, SQUIRREL_API_BASE_URL="https://sync.example.org", SQUIRREL_API_KEY="sqk_first_key"
    )
    two, _ = config(
        tmp_path, SQUIRREL_API_BASE_URL="https://sync.example.org", SQUIRREL_API_KEY="sqk_other_key"
    )
    assert identity(one) != identity(two)
    assert "sqk_first_key" not in identity(one)


def test_the_parts_of_an_identity_never_run_together(tmp_path: Path) -> None:
    """Spelt one after the other these two were one text; as a JSON list they are two identities."""
    one, _ = config(
        tmp_path, SQUIRREL_VAULT=f"{tmp_path}/a cache {tmp_path}/b", SQUIRREL_MEMORY_CACHE_DIR=f"{tmp_path}/c"
    )
    two, _ = config(
        tmp_path, SQUIRREL_VAULT=f"{tmp_path}/a", SQUIRREL_MEMORY_CACHE_DIR=f"{tmp_path}/b cache {tmp_path}/c"
    )
    assert identity(one) != identity(two)
    assert json.loads(identity(one)) == [
        "vault",
        f"{tmp_path}/a cache {tmp_path}/b",
        "cache",
        f"{tmp_path}/c",
    ]


def test_a_hello_round_trips_and_anything_else_is_refused(tmp_path: Path) -> None:
    ours = hello(tmp_path)
    assert Hello.read(ours.line()) == ours
    for line in [
        b"not json",
        b"[]",
        json.dumps({"squirrel-mcp": 2, "identity": "x", "settings": {}}).encode(),
        json.dumps({"squirrel-mcp": 1, "identity": 3, "settings": {}}).encode(),
        json.dumps({"squirrel-mcp": 1, "identity": "x", "settings": {"a": 1}}).encode(),
        json.dumps({"squirrel-mcp": 1, "identity": "x", "settings": {}, "passphrase": 5}).encode(),
    ]:
        with pytest.raises(HelloError):
            Hello.read(line)
    for changes in ({"passphrase": "\ud800"}, {"identity": "x\udfff"}, {"settings": {"\udc80": "1"}}):
        line = json.dumps({**json.loads(ours.line()), **changes}).encode()
        with pytest.raises(HelloError, match="not Unicode"):
            Hello.read(line)
    changed = ours._replace(changed=True)
    assert Hello.read(changed.line()) == changed
    for wrong in (
        changed._replace(passphrase=None),
        changed._replace(page=PageRequest(0, handoff=False, idle=60.0)),
    ):
        with pytest.raises(HelloError):
            Hello.read(wrong.line())
    assert read_answer(answer(None)) is None
    assert read_answer(answer("no, because")) == "no, because"
    with pytest.raises(HelloError):
        read_answer(b'{"ok": false}')


def test_a_page_hello_round_trips_and_a_bad_page_is_refused(tmp_path: Path) -> None:
    asking = hello(tmp_path)._replace(page=PageRequest(8765, handoff=True, idle=1800.0))
    assert Hello.read(asking.line()) == asking
    assert Hello.read(hello(tmp_path).line()).page is None
    lasting = hello(tmp_path)._replace(page=PageRequest(0, handoff=False, idle=90.0))
    assert Hello.read(lasting.line()) == lasting
    base = {"squirrel-mcp": 1, "identity": "x", "settings": {}, "passphrase": None}
    for page in [
        3,
        {"port": -1, "handoff": True},
        {"port": 65536, "handoff": True},
        {"port": True, "handoff": True},
        {"port": "80", "handoff": True},
        {"port": 80, "handoff": "yes"},
        {"port": 80},
        {"port": 80, "handoff": True, "idle": 0},
        {"port": 80, "handoff": True, "idle": -5},
        {"port": 80, "handoff": True, "idle": "60"},
        {"port": 80, "handoff": True, "idle": True},
        {"port": 80, "handoff": True, "idle": float("inf")},
    ]:
        with pytest.raises(HelloError):
            Hello.read(json.dumps({**base, "page": page}).encode())
    assert read_page_answer(page_answer(url="http://127.0.0.1:1/?token=t", handoff=None)) == (
        "http://127.0.0.1:1/?token=t",
        None,
    )
    assert read_page_answer(page_answer(url="u", handoff="file:///run/x.html")) == ("u", "file:///run/x.html")
    with pytest.raises(HelloError, match=r"^cannot listen, because$"):
        read_page_answer(page_answer(error="cannot listen, because"))
    for line in [b"", b"{}", b"[1]", b"not json"]:
        with pytest.raises(HelloError, match="ended before the page listened"):
            read_page_answer(line)


class Replies:
    """What a relay writes to its host (stdout), one message per line."""

    def __init__(self) -> None:
        self.lines: list[bytes] = []

    def write(self, line: bytes) -> None:
        self.lines.append(line)

    def flush(self) -> None:
        pass


def test_a_request_that_never_left_goes_to_the_next_memory_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sent to a connection already gone (the write fails): no process read it, so the next one gets it."""
    failed = threading.Event()

    class GoneConnection:
        """The connection to a memory process that died: nothing can be written to it."""

        def sendall(self, data: bytes) -> None:
            failed.set()
            raise BrokenPipeError

        def shutdown(self, how: int) -> None:
            pass

    # The old connection's reading side, which sees its end only when the test says.
    old_reader, old_writer = os.pipe()
    fresh, fresh_peer = socket.socketpair()

    class NextProcess:
        def connect(self) -> tuple[socket.socket, object]:
            return fresh, fresh.makefile("rb")

    call = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "get_context", "arguments": {}},
    }
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(json.dumps(call).encode() + b"\n")))
    relay = Relay(NextProcess(), GoneConnection(), os.fdopen(old_reader, "rb"))  # type: ignore[arg-type]
    replies = relay.out = Replies()  # type: ignore[assignment]
    up = threading.Thread(target=relay.up, daemon=True)
    up.start()
    assert failed.wait(30)
    # Taken back from the requests awaiting an answer (so the end of the old connection does not
    # answer it as lost), before the reading side has seen that end.
    deadline = time.monotonic() + 30
    while relay.outstanding and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not relay.outstanding
    down = threading.Thread(target=relay.down, daemon=True)
    down.start()
    os.close(old_writer)
    with fresh_peer.makefile("rb") as from_bridge:
        assert json.loads(from_bridge.readline()) == call
        answer_line = {"jsonrpc": "2.0", "id": 7, "result": {"content": []}}
        fresh_peer.sendall(json.dumps(answer_line).encode() + b"\n")
        assert from_bridge.readline() == b""  # the host's input ended: the bridge said so
    fresh_peer.close()
    up.join(30)
    down.join(30)
    assert not up.is_alive() and not down.is_alive()
    # The host got the new process's answer, and no "may or may not have been done".
    assert [json.loads(line) for line in replies.lines] == [answer_line]


def test_the_idle_setting() -> None:
    assert idle_seconds(None) == DEFAULT_IDLE
    assert idle_seconds("0") == 0
    assert idle_seconds("2.5") == 2.5
    for bad in ("-1", "soon", "nan", "inf"):
        with pytest.raises(ValueError, match="SQUIRREL_MCP_SHARED_IDLE must be a number"):
            idle_seconds(bad)


def test_the_runtime_directory_is_used_when_it_is_the_users_alone(tmp_path: Path) -> None:
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    made = runtime_directory({"XDG_RUNTIME_DIR": str(runtime)})
    assert made == runtime / "squirrel-mcp"
    assert made.stat().st_mode & 0o777 == 0o700


def test_an_open_runtime_directory_is_passed_over_and_an_open_channel_directory_refused(
    tmp_path: Path,
) -> None:
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    runtime.chmod(0o755)
    assert runtime_directory({"XDG_RUNTIME_DIR": str(runtime)}).parent != runtime
    runtime.chmod(0o700)
    (runtime / "squirrel-mcp").mkdir(mode=0o700)
    (runtime / "squirrel-mcp").chmod(0o733)
    # Its own directory open to others: the temporary directory's instead, never the open one.
    assert runtime_directory({"XDG_RUNTIME_DIR": str(runtime)}).parent != runtime


def test_a_link_or_another_users_directory_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    (tmp_path / f"squirrel-mcp-{os.getuid()}").symlink_to(target)
    with pytest.raises(ChannelError, match="is not a directory"):
        runtime_directory({})
    (tmp_path / f"squirrel-mcp-{os.getuid()}").unlink()
    if os.geteuid() == 0:
        (tmp_path / f"squirrel-mcp-{os.getuid()}").mkdir(mode=0o700)
        os.chown(tmp_path / f"squirrel-mcp-{os.getuid()}", 65534, 65534)
        with pytest.raises(ChannelError, match="belongs to another user"):
            runtime_directory({})


def test_a_runtime_directory_too_long_for_a_socket_gives_way_to_the_temporary_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = tmp_path / ("r" * 90)
    runtime.mkdir(mode=0o700)
    short = Path(tempfile.mkdtemp(dir="/tmp"))  # pytest's own temporary paths are too long here
    try:
        monkeypatch.setattr("tempfile.tempdir", str(short))
        channel = Channel.of("vault X", {"XDG_RUNTIME_DIR": str(runtime)})
        assert channel.directory == short / f"squirrel-mcp-{os.getuid()}"
        assert not (runtime / "squirrel-mcp").exists()
        # A runtime directory just short enough is the one used.
        room = MAX_SOCKET_PATH - len(f"/squirrel-mcp/{channel.name}.sock") - len(str(short)) - 1
        fits = short / ("f" * room)
        fits.mkdir(mode=0o700)
        chosen = Channel.of("vault X", {"XDG_RUNTIME_DIR": str(fits)})
        assert chosen.directory == fits / "squirrel-mcp"
        assert len(os.fsencode(chosen.socket_path)) == MAX_SOCKET_PATH
    finally:
        shutil.rmtree(short)


def test_a_socket_path_too_long_everywhere_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    long_temporary = tmp_path / ("t" * 90)
    long_temporary.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(long_temporary))
    with pytest.raises(ChannelError, match="too long"):
        Channel.of("vault X", {})


def test_the_lock_is_held_by_one_holder_at_a_time(tmp_path: Path) -> None:
    lock = tmp_path / "x.lock"
    first = try_lock(lock)
    assert first is not None
    try:
        # flock locks belong to the open file: a second open, even in this process, is refused.
        assert try_lock(lock) is None
        assert lock.read_text().strip() == str(os.getpid())
    finally:
        os.close(first)
    second = try_lock(lock)
    assert second is not None
    os.close(second)


def test_the_peer_check_reads_the_kernels_user_id() -> None:
    left, right = socket.socketpair(socket.AF_UNIX)
    try:
        check_peer(left)
        if os.geteuid() == 0:
            os.seteuid(65534)
            try:
                other_left, other_right = socket.socketpair(socket.AF_UNIX)
            finally:
                os.seteuid(0)
            try:
                with pytest.raises(PeerRefused, match="uid 65534"):
                    check_peer(other_left)
            finally:
                other_left.close()
                other_right.close()
    finally:
        left.close()
        right.close()


# What a bridge is made of --------------------------------------------------------------------------

HOMES = [
    {"HOME": "/home/ann"},
    {"HOME": "/home/ann", "XDG_DATA_HOME": "/data", "XDG_CACHE_HOME": "/cache"},
    {"HOME": "/home/ann", "XDG_DATA_HOME": "relative", "XDG_CACHE_HOME": ""},
    {"HOME": "/home/ann", "XDG_DATA_HOME": " ", "XDG_CACHE_HOME": "/cache/"},
]


@pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the paths read without platformdirs are Linux's"
)
@pytest.mark.parametrize("home", HOMES)
def test_the_default_paths_are_the_ones_platformdirs_gives(
    home: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import platformdirs

    for name in ("HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in home.items():
        monkeypatch.setenv(name, value)
    assert linux_user_directory("XDG_DATA_HOME", ".local/share") is not None  # read here, not by platformdirs
    assert default_vault_path() == platformdirs.user_data_path(APP_NAME, appauthor=False) / "vault.sqlite3"
    assert default_cache_dir() == Path(platformdirs.user_cache_dir())


@pytest.mark.process
def test_a_bridge_imports_neither_dataclasses_nor_platformdirs(tmp_path: Path) -> None:
    """Each adds over a MB to every host's bridge (inspect and ast; tempfile, shutil and random)."""
    script = (
        "import sys\n"
        "from squirrel_mcp.cli.bridging import bridged\n"
        "from squirrel_mcp.core.config import Config\n"
        "Config.from_env()\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    loaded = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, check=True
    ).stdout.split()
    assert b"squirrel_mcp.cli.bridge" in loaded
    heavy = {b"dataclasses", b"inspect", b"platformdirs", b"tempfile", b"pydantic", b"mcp", b"anyio"}
    assert heavy.isdisjoint(loaded), heavy & set(loaded)


def test_the_memory_process_listens_before_it_imports_the_server_or_the_vaults_code(tmp_path: Path) -> None:
    """The bridge that started it connects as soon as it listens, instead of trying again every 50 ms."""
    script = (
        "import sys\n"
        "from squirrel_mcp.cli import memory_process\n"
        "def listening(channel, lock):\n"
        "    print(' '.join(sorted(sys.modules)))\n"
        "    raise SystemExit(0)\n"
        "memory_process.Listening = listening\n"
        "memory_process.main()\n"
    )
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        "XDG_RUNTIME_DIR": str(runtime),
        "SQUIRREL_VAULT": str(tmp_path / "vault.sqlite3"),
        "SQUIRREL_MEMORY_CACHE_DIR": str(tmp_path / "cache"),
        "SQUIRREL_PASSPHRASE": PASSPHRASE,
    }
    loaded = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, check=True, timeout=120
    ).stdout.split()
    assert b"squirrel_mcp.cli.memory_process" in loaded
    later = {b"mcp", b"squirrel_mcp.server.app", b"squirrel_mcp.cli.unlock", b"squirrel_mcp.book.memories"}
    assert later.isdisjoint(loaded), later & set(loaded)


def test_no_secret_shows_in_a_config_or_a_hello(tmp_path: Path) -> None:
    made, _ = config(tmp_path, SQUIRREL_API_KEY="the-api-key", SQUIRREL_NEW_PASSPHRASE="the new one")
    shown = repr(made) + repr(hello(tmp_path)) + str(made) + repr([made])
    assert PASSPHRASE not in shown and "the-api-key" not in shown and "the new one" not in shown
    assert "passphrase=<hidden>" in shown and "passphrase=None" in repr(made._replace(passphrase=None))
