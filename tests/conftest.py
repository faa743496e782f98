"""Shared fixtures: a throwaway vault, and the real server over stdio through the mcp client.

Every test is also scanned for leaks (`scan_for_secrets`, autouse): whatever the
servers it started wrote on stderr, every CLI run's stderr and every tool error
text must hold none of the secrets and memory texts the test used. Secrets are
registered as they pass through these helpers: passphrases and API keys in the
environments given to `server_params` and `run_cli`, string arguments of `call`
and `call_error` (memory text, entity, query, tags, reasons), and anything a test
adds with `secrets.add`.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TextIO

import anyio
import mcp.client.client
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from squirrel_mcp.core.models import HALF_LIFE_DAYS
from squirrel_mcp_embeddings.integrity import PACKAGED_MODEL_DIR

PASSPHRASE = "correct horse battery staple"
# Shorter strings (tags like "food", categories) may well appear in a path or a fixed line.
MIN_SECRET = 8
SECRET_VARIABLES = ("SQUIRREL_PASSPHRASE", "SQUIRREL_NEW_PASSPHRASE", "SQUIRREL_API_KEY")
MEMORY_ID = re.compile(r"[0-9a-f]{16}")


class Secrets:
    """What one test must never see in a log line or an error: registered as it is used."""

    def __init__(self) -> None:
        self.values: set[str] = {PASSPHRASE}
        # Texts to scan: stderr of CLI runs and tool error texts (server stderr goes to files).
        self.texts: list[tuple[str, str]] = []
        self.stderr_files: list[Path] = []

    def add(self, value: object) -> None:
        """Register a string (or the strings in a list or dict) as secret."""
        if isinstance(value, str):
            # A memory id is an address and a category a word of the schema, not secrets:
            # errors name them on purpose.
            public = MEMORY_ID.fullmatch(value) or value in HALF_LIFE_DAYS
            if len(value.strip()) >= MIN_SECRET and not public:
                self.values.add(value.strip())
        elif isinstance(value, list | tuple):
            for item in value:
                self.add(item)
        elif isinstance(value, dict):
            for item in value.values():
                self.add(item)

    def add_env(self, env: dict[str, str]) -> None:
        """Register the secrets of a server's environment."""
        for name in SECRET_VARIABLES:
            if env.get(name):
                self.add(env[name])

    def leaks(self, text: str, ignore: str = "") -> list[str]:
        """The registered secrets found in `text` (paths under `ignore` removed first: test names)."""
        if ignore:
            text = re.sub(re.escape(ignore) + r"\S*", "<path>", text)
        folded = text.casefold()
        return sorted(value for value in self.values if value.casefold() in folded)


_current: Secrets | None = None


def secrets_of_this_test() -> Secrets:
    """The running test's registry (a fresh one outside a test)."""
    global _current
    if _current is None:
        _current = Secrets()
    return _current


@pytest.fixture(autouse=True)
def scan_for_secrets(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Secrets]:
    """Fail the test if a server's stderr, a CLI's stderr or a tool error shows a secret it used."""
    global _current
    _current = registry = Secrets()
    stderr_dir = tmp_path_factory.mktemp("server-stderr")

    # Client(server_params(...)) starts the server through this name with the default
    # errlog (the terminal); each server of this test writes to a file of its own instead.
    @asynccontextmanager
    async def stdio_to_file(
        server: StdioServerParameters, errlog: TextIO | None = None
    ) -> AsyncIterator[Any]:
        if errlog is not None:
            async with stdio_client(server, errlog=errlog) as streams:
                yield streams
            return
        path = stderr_dir / f"server-{len(registry.stderr_files)}.txt"
        registry.stderr_files.append(path)
        with path.open("w", encoding="utf-8") as log:
            async with stdio_client(server, errlog=log) as streams:
                yield streams

    monkeypatch.setattr(mcp.client.client, "stdio_client", stdio_to_file)
    test_dir = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames else None
    yield registry
    _current = None
    base = str(tmp_path_factory.getbasetemp())
    # Files a test chose itself for a server's stderr (tests/test_*_stdio.py name them so).
    own = sorted(Path(test_dir).glob("stderr-*.txt")) if test_dir is not None else []
    found = [
        (str(path.name), leak)
        for path in [*registry.stderr_files, *own]
        if path.exists()
        for leak in registry.leaks(path.read_text(encoding="utf-8", errors="replace"), base)
    ]
    found += [(where, leak) for where, text in registry.texts for leak in registry.leaks(text, base)]
    assert not found, f"secrets leaked (where, secret): {found}"


UNIT_ONLY = os.environ.get("SQUIRREL_TEST_UNIT") == "1"


RELIABILITY = Path(__file__).parent / "reliability"

# `nox -s tests` runs the tests side by side, a module per worker (pytest-xdist, `--dist
# loadfile`): a module's fixtures (wheels built, an npm install, a warmed vault) are made once.
# The longest modules first (minutes each under load), so that no worker starts one of them
# when the others are nearly done: the run then ends about when its longest worker does.
LONGEST_FIRST = (
    "sync/test_contract.py",
    "test_install.py",
    "reliability/test_passphrase_kills.py",
    "test_cli_person.py",
    "test_release.py",
    "test_quick_start.py",
    "sync/test_syncserver.py",
    "reliability/test_tampering.py",
    "sync/test_two_machines.py",
    "sync/test_hardening_client.py",
    "test_server.py",
    "sync/test_remote_cli.py",
    "sync/test_sync_keys.py",
    "sync/test_log_integrity_sync.py",
    "reliability/test_crash.py",
    "sync/test_hardening_server.py",
    "sync/test_remote_storage.py",
    "sync/test_passphrase_sync.py",
    "test_end_of_input.py",
    "test_log_integrity.py",
    "reliability/test_fuzz.py",
    "test_recall_gate.py",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--reliability",
        action="store_true",
        help="also collect tests/reliability (kills, soak, fuzzing: minutes), as `nox -s tests` does",
    )
    parser.addoption(
        "--hosts-only",
        action="store_true",
        help="only the tests that start a server as a host does (server_params, host_env, ts_calls, "
        "the client fixture): what SQUIRREL_TEST_SHARED changes",
    )


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """tests/reliability is collected when named (`pytest tests/reliability`) or with --reliability."""
    if collection_path != RELIABILITY or config.getoption("--reliability"):
        return None
    named = any(Path(arg.split("::")[0]).resolve().is_relative_to(RELIABILITY) for arg in config.args)
    return None if named else True


def schedule_key(item: pytest.Item) -> int:
    """Where `item` comes in the run: its module's place in LONGEST_FIRST, the rest after."""
    module = item.path.relative_to(Path(__file__).parent).as_posix()
    return LONGEST_FIRST.index(module) if module in LONGEST_FIRST else len(LONGEST_FIRST)


# What a module calls when it starts a server as a host does (the suite's mode decides how).
STARTS_A_HOST = re.compile(r"\b(server_params|host_env|ts_calls)\(|\brun_cli\(\w+, (stdin=|\"ui\")")


@functools.cache
def calls_a_host(function: Any) -> bool:
    """True when `function`'s source, or that of a function or class of the suite it calls, starts a host."""
    if not getattr(function, "__module__", "").startswith("tests"):
        return False  # pytest's own fixtures start no host
    try:
        # Without its comments: a comment naming server_params( starts nothing.
        source = re.sub(r"#[^\n]*", "", inspect.getsource(function))
    except (OSError, TypeError):
        return True  # a function made at run time: kept, as unknown
    if STARTS_A_HOST.search(source):
        return True
    # The suite's functions and classes it calls by name (its module's, or imported from another
    # test module); run_cli serves only when called as STARTS_A_HOST says, so its own source is
    # not followed.
    # A decorated helper (a @contextmanager) names what it calls in its own module, not the decorator's.
    unwrapped = inspect.unwrap(function)
    names = getattr(unwrapped, "__globals__", None) or vars(sys.modules[function.__module__])
    helpers = [
        value
        for name, value in names.items()
        if (inspect.isfunction(value) or inspect.isclass(value))
        and value not in (function, run_cli)
        and re.search(rf"\b{name}\(", source)
    ]
    return any(calls_a_host(helper) for helper in helpers)


def starts_a_host(item: pytest.Item) -> bool:
    """True when `item` may start a server as a host does: it, a fixture of its or a helper it calls does."""
    function = getattr(item, "function", None)
    if function is None or calls_a_host(function):
        return True
    definitions = getattr(item, "_fixtureinfo", None)
    for name in getattr(item, "fixturenames", ()):
        for definition in definitions.name2fixturedefs.get(name, ()) if definitions else ():
            if calls_a_host(definition.func):
                return True
    return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest modules first; in `nox -s unit`, tests marked `process` are skipped
    before anything of theirs runs; with --hosts-only, only the tests that start a host's server.

    The skip is for modules whose process starts are wrapped by a library (Playwright's
    driver, a server started in a thread), where the refusal below would surface as an error.
    """
    items.sort(key=schedule_key)  # stable: the order within a module stays as written
    if config.getoption("--hosts-only"):
        others = [item for item in items if not starts_a_host(item)]
        if others:
            config.hook.pytest_deselected(items=others)
            items[:] = [item for item in items if starts_a_host(item)]
    if UNIT_ONLY:
        skip = pytest.mark.skip(reason="starts processes: run by `nox -s tests`, not `nox -s unit`")
        for item in items:
            if item.get_closest_marker("process"):
                item.add_marker(skip)


@pytest.fixture(autouse=True, scope="session")
def unit_only() -> Iterator[None]:
    """In `nox -s unit` (SQUIRREL_TEST_UNIT=1), a test is skipped where it would start a process.

    Servers, CLIs, sync servers, npm and pip all start through subprocess.Popen (asyncio's
    and anyio's process functions too), so refusing it there leaves exactly the tests that
    run in this interpreter. Session-wide, so that module fixtures (an npm install) are
    refused too. The model is not fetched in that session and no PostgreSQL is started,
    so the tests needing either skip as they do anywhere without them.
    """
    if not UNIT_ONLY:
        yield
        return

    def refuse(self: subprocess.Popen[bytes], *args: object, **kwargs: object) -> None:
        pytest.skip("starts a process: run by `nox -s tests`, not `nox -s unit`")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(subprocess.Popen, "__init__", refuse)
        yield


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def default_vault(data_home: Path) -> dict[str, str]:
    """XDG_DATA_HOME, and SQUIRREL_VAULT naming its default vault: the one place a server creates one."""
    return {
        "XDG_DATA_HOME": str(data_home),
        "SQUIRREL_VAULT": str(data_home / "squirrel-mcp" / "vault.sqlite3"),
    }


@pytest.fixture
def vault_env(tmp_path: Path) -> dict[str, str]:
    """Environment for a server on a fresh vault in tmp_path (created at first start).

    The vault is the default one of its XDG_DATA_HOME, named: a server creates a vault only there.
    """
    return {
        **default_vault(tmp_path / "xdg-data"),
        "SQUIRREL_PASSPHRASE": PASSPHRASE,
        "HOME": str(tmp_path / "home"),
        "XDG_CACHE_HOME": str(tmp_path / "xdg-cache"),
        # Installed plugins never leak into tests: a test that wants one names it.
        "SQUIRREL_MCP_PLUGINS": "",
        # Hosts are in no project, wherever the suite runs (a checkout's folder is a project):
        # the tests of projects drop this to let the working directory say.
        "SQUIRREL_PROJECT": "",
    }


# Every server a test starts as a host does (`server_params`, `host_env`) is a host's bridge to
# the vault's one memory process, ending once its last bridge has gone (no idle time), as the
# product's default is; SQUIRREL_TEST_SHARED=0 makes each a server of its own
# (SQUIRREL_MCP_SHARED=0). `nox -s tests` runs the suite's server tests both ways.
SHARED_MODE = os.environ.get("SQUIRREL_TEST_SHARED") != "0"
_shared_runtime: list[str] = []


def shared_runtime() -> str:
    """This test process's channel directory for the memory processes (short: a socket's path is)."""
    if not _shared_runtime:
        _shared_runtime.append(tempfile.mkdtemp(prefix="sq-rt-"))
    return _shared_runtime[0]


def host_env(env: dict[str, str]) -> dict[str, str]:
    """`env` for a host's server in the suite's mode: a bridge, or a server of its own; as a test chose."""
    if "SQUIRREL_MCP_SHARED" in env:
        return env
    if not SHARED_MODE:
        return {"SQUIRREL_MCP_SHARED": "0", **env}
    return {
        "SQUIRREL_MCP_SHARED": "1",
        "SQUIRREL_MCP_SHARED_IDLE": "0",
        "XDG_RUNTIME_DIR": shared_runtime(),
        **env,
    }


def server_params(env: dict[str, str]) -> StdioServerParameters:
    """Start the installed server the way an MCP client does."""
    secrets_of_this_test().add_env(env)
    return StdioServerParameters(command=sys.executable, args=["-m", "squirrel_mcp"], env=host_env(env))


def run_cli(
    env: dict[str, str],
    *args: str,
    stdin: bytes | None = None,
    timeout: float = 120,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run `squirrel-mcp ARGS` with exactly `env` (plus PATH), capturing output (stderr is scanned).

    `timeout` is a backstop against a hang; a run that waits for the warm-up passes WARM_WAIT.
    `cwd`: the directory it runs in (the current one when None).
    """
    registry = secrets_of_this_test()
    registry.add_env(env)
    if args in ((), ("serve",)) or args[:1] == ("ui",):
        # The server, piped (a host's), and the page (the memory process serves it): in the suite's mode.
        env = host_env(env)
    result = subprocess.run(
        [sys.executable, "-m", "squirrel_mcp", *args],
        env={"PATH": os.environ["PATH"], **env},
        input=stdin,
        capture_output=True,
        timeout=timeout,
        check=False,
        cwd=cwd,
    )
    stderr = result.stderr.decode(errors="replace")
    registry.texts.append((f"stderr of squirrel-mcp {' '.join(args)}", stderr))
    return result


@pytest.fixture
async def client(vault_env: dict[str, str]) -> AsyncIterator[Client]:
    """A connected mcp client of a server on a fresh vault."""
    async with Client(server_params(vault_env)) as connected:
        yield connected


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """Call a tool that must succeed; its structured output."""
    secrets_of_this_test().add(arguments)
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


async def call_error(client: Client, tool: str, **arguments: Any) -> str:
    """Call a tool that must fail; its error text (scanned for the test's secrets)."""
    registry = secrets_of_this_test()
    registry.add(arguments)
    result = await client.call_tool(tool, arguments)
    assert result.is_error, result.structured_content
    text = result.content[0]
    assert text.type == "text"
    registry.texts.append((f"error of {tool}", text.text))
    return text.text


async def served_error(params: StdioServerParameters) -> str:
    """The one line a server that cannot unlock answers every tool call with, and prints once.

    The server keeps serving on such errors (the host shows the line); the commands exit instead.
    """
    async with Client(params) as connected:
        line = await call_error(connected, "get_context")
    stderr = secrets_of_this_test().stderr_files[-1].read_text(encoding="utf-8", errors="replace")
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines() == [line], stderr
    return line


# For tests that start the real model: it is in the package only once fetched.
needs_model = pytest.mark.skipif(
    UNIT_ONLY or not (PACKAGED_MODEL_DIR / "model.onnx").exists(),
    reason="the model is not fetched (nox -s fetch_model), or this is `nox -s unit`",
)


# The start of the note every answer carries while the embeddings plugin is still warming up.
WARMING = "Search by meaning is warming up"
# How long a test waits for the warm-up to embed its memories (a few thousand at most, on a loaded machine).
WARM_WAIT = 600.0


async def search_warm(client: Client, **arguments: Any) -> dict[str, Any]:
    """Search until the warm-up is done (hybrid, without its note), <= WARM_WAIT s."""
    deadline = time.monotonic() + WARM_WAIT
    while True:
        found = await call(client, "search_memory", **arguments)
        warming = WARMING in found.get("note", "")
        if (found["ranking"] == "hybrid" and not warming) or time.monotonic() > deadline:
            return found
        await anyio.sleep(0.5)


async def search_when(client: Client, ranking: str, **arguments: Any) -> dict[str, Any]:
    """Search until the answer's ranking is `ranking` (the model loads in the background), <= 60 s."""
    deadline = time.monotonic() + 60
    while True:
        found = await call(client, "search_memory", **arguments)
        if found["ranking"] == ranking or time.monotonic() > deadline:
            return found
        await anyio.sleep(0.2)


# The TypeScript SDK, the client most hosts are built on, and the host scripts that drive it.
HOSTS = Path(__file__).parent / "hosts"
TS_CLIENT = HOSTS / "ts_client.mjs"
TS_CALLS = HOSTS / "ts_calls.mjs"
TS_SDK = "@modelcontextprotocol/sdk@1.32.2"


@pytest.fixture(scope="session")
def ts_sdk(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the pinned TypeScript SDK and the host scripts, installed from npm once."""
    if shutil.which("npm") is None or shutil.which("node") is None:
        pytest.skip("Node.js and npm are needed to check the server through the TypeScript SDK")
    prefix = tmp_path_factory.mktemp("ts-host")
    subprocess.run(
        ["npm", "install", "--silent", "--no-audit", "--no-fund", "--prefix", str(prefix), TS_SDK],
        check=True,
        timeout=600,
    )
    # Node resolves an ES module's imports next to the script, not through NODE_PATH.
    for script in (TS_CLIENT, TS_CALLS):
        shutil.copy(script, prefix / script.name)
    return prefix


def ts_calls(ts_sdk: Path, env: dict[str, str], calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Make `calls` ({"tool", "arguments"}) in order through a TypeScript SDK host of a server on `env`.

    Each answer as the host got it: `isError`, `structuredContent`, `text` (the first
    content block's). Tool errors are scanned for the test's secrets, as `call_error`'s are.
    """
    registry = secrets_of_this_test()
    for each in calls:
        registry.add(each["arguments"])
    server = server_params(env)
    result = subprocess.run(
        ["node", str(ts_sdk / TS_CALLS.name), server.command, *server.args],
        env={"PATH": os.environ["PATH"], **(server.env or env)},
        input=json.dumps(calls).encode(),
        capture_output=True,
        timeout=300,
        check=False,
    )
    stderr = result.stderr.decode(errors="replace")
    registry.texts.append(("stderr of the TypeScript host", stderr))
    assert result.returncode == 0, stderr
    answers: list[dict[str, Any]] = json.loads(result.stdout)
    registry.texts.extend(("error through the TypeScript host", a["text"]) for a in answers if a["isError"])
    return answers


def plugin_path(folder: Path, module: Path, entry_point: str) -> str:
    """A folder, for a server's PYTHONPATH, holding `module` installed as the plugin `entry_point`.

    A distribution's metadata (a dist-info with the `squirrel_mcp` entry point) beside
    the module is what an install leaves, without building or installing a wheel.
    """
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(module, folder / module.name)
    name = module.stem
    info = folder / f"{name}-0.1.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[squirrel_mcp]\n{entry_point} = {name}\n", encoding="utf-8")
    return str(folder)
