"""The passphrase kept in a real Secret Service: GNOME Keyring on a private D-Bus session.

Each test starts its own `dbus-daemon` and an unlocked `gnome-keyring-daemon` in
it (a test password on its stdin), in the test's temporary HOME and XDG folders,
and kills both process groups afterwards. `nox -s tests` installs Debian's
gnome-keyring and dbus through .ci/keyring; without them the tests are skipped,
saying why, unless SQUIRREL_TEST_KEYRING_REQUIRED=1 (set by .ci/run), which
makes it an error.

What they show: `init --keychain` prints a host block without a secret, and the
server started with no SQUIRREL_PASSPHRASE unlocks from the keychain; once the
entry is forgotten, the keyring locked or its daemon frozen, every tool call
answers one line saying which, within the keychain's time bound; `passphrase`
renews the entry; doctor's keychain line in each of its states. No secret is in
anything the tests wrote outside the keyring's own files.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from jeepney import DBusAddress, new_method_call
from jeepney.bus_messages import message_bus
from jeepney.io.blocking import open_dbus_connection
from mcp import Client

from squirrel_mcp.core.keychain import SERVICE, TIMEOUT
from tests import terminal
from tests.conftest import PASSPHRASE, call, call_error, run_cli, secrets_of_this_test, server_params
from tests.shared_support import memory_process, memory_processes
from tests.sync.conftest import start_sync_server

pytestmark = pytest.mark.process

NEW_PASSPHRASE = "a brand new passphrase, longer"
KEYRING_PASSWORD = "the keyring's own test password"
# How long a daemon may take to start and a server to answer, under load (a bound, not a sleep).
START_WITHIN = 60.0
SECRETS = "org.freedesktop.secrets"
SERVICE_PATH = "/org/freedesktop/secrets"


@dataclass
class SecretService:
    """A private D-Bus session with an unlocked GNOME Keyring in it."""

    env: dict[str, str]
    keyring_process: subprocess.Popen[bytes]
    address: str
    keyring_files: Path

    def lock(self) -> None:
        """Lock the default collection, as the desktop does when the screen locks."""
        connection = open_dbus_connection(self.address)
        try:
            service = DBusAddress(SERVICE_PATH, bus_name=SECRETS, interface="org.freedesktop.Secret.Service")
            (collection,) = connection.send_and_get_reply(
                new_method_call(service, "ReadAlias", "s", ("default",)), timeout=START_WITHIN
            ).body
            reply = connection.send_and_get_reply(
                new_method_call(service, "Lock", "ao", ([collection],)), timeout=START_WITHIN
            )
            locked, _prompt = reply.body
            assert locked == [collection]
        finally:
            connection.close()


def missing_tools() -> str | None:
    """Why the Secret Service cannot be started here, or None."""
    for tool in ("dbus-daemon", "gnome-keyring-daemon"):
        if shutil.which(tool) is None:
            return f"{tool} is missing: .ci/keyring installs Debian's gnome-keyring and dbus (as root)"
    return None


def stop(process: subprocess.Popen[bytes]) -> None:
    """Kill the process group `process` leads (it was started in a session of its own)."""
    with contextlib.suppress(ProcessLookupError):  # it died already
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=START_WITHIN)


def read_line(process: subprocess.Popen[bytes], within: float) -> str:
    """The first line `process` prints on stdout, waited for at most `within` seconds."""
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], within)
    assert ready, "dbus-daemon printed no address"
    return process.stdout.readline().decode().strip()


def wait_for_owner(address: str) -> None:
    """Wait (bounded) until the keyring daemon owns the Secret Service's name on the bus.

    NameHasOwner, not a call to the service: a call would make D-Bus start a keyring
    of its own, locked, if the test's one had not registered yet.
    """
    connection = open_dbus_connection(address)
    try:
        deadline = time.monotonic() + START_WITHIN
        while not connection.send_and_get_reply(message_bus.NameHasOwner(SECRETS)).body[0]:
            assert time.monotonic() < deadline, "gnome-keyring-daemon did not register on the bus"
            time.sleep(0.05)
    finally:
        connection.close()


@pytest.fixture
def secret_service(vault_env: dict[str, str], tmp_path: Path) -> Iterator[SecretService]:
    """GNOME Keyring, unlocked, on a D-Bus session of this test; both killed afterwards."""
    why = missing_tools()
    if why is not None:
        if os.environ.get("SQUIRREL_TEST_KEYRING_REQUIRED") == "1":
            pytest.fail(why)
        pytest.skip(why)
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    env = {k: v for k, v in vault_env.items() if k != "SQUIRREL_PASSPHRASE"}
    env |= {"XDG_RUNTIME_DIR": str(runtime), "XDG_CONFIG_HOME": str(tmp_path / "xdg-config")}
    daemon_env = {"PATH": os.environ["PATH"], **env}
    with (tmp_path / "dbus-daemon.log").open("wb") as log:
        bus = subprocess.Popen(
            ["dbus-daemon", "--session", "--nofork", "--nopidfile", "--print-address=1"],
            stdout=subprocess.PIPE,
            stderr=log,
            env=daemon_env,
            start_new_session=True,
        )
    keyring = None
    try:
        address = read_line(bus, START_WITHIN)
        env["DBUS_SESSION_BUS_ADDRESS"] = address
        with (tmp_path / "keyring-daemon.log").open("wb") as log:
            keyring = subprocess.Popen(
                ["gnome-keyring-daemon", "--foreground", "--unlock", "--components=secrets"],
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=log,
                env={**daemon_env, "DBUS_SESSION_BUS_ADDRESS": address},
                start_new_session=True,
            )
        assert keyring.stdin is not None
        keyring.stdin.write(KEYRING_PASSWORD.encode())
        keyring.stdin.close()
        wait_for_owner(address)
        yield SecretService(env, keyring, address, Path(vault_env["XDG_DATA_HOME"]) / "keyrings")
    finally:
        if keyring is not None:
            stop(keyring)
        stop(bus)


def cli(env: dict[str, str], *args: str, outputs: list[str]) -> subprocess.CompletedProcess[bytes]:
    """`run_cli`, its stdout kept for the final scan (run_cli's registry scans stderr)."""
    result = run_cli(env, *args, timeout=START_WITHIN + TIMEOUT)
    outputs.append(result.stdout.decode(errors="replace"))
    outputs.append(result.stderr.decode(errors="replace"))
    return result


def keychain_line(doctor: subprocess.CompletedProcess[bytes]) -> str:
    """doctor's keychain line."""
    (line,) = [line for line in doctor.stdout.decode().splitlines() if " keychain: " in line]
    return line


async def every_call_says(env: dict[str, str], expected: str) -> tuple[str, float]:
    """Start the server; every tool call answers the same one line holding `expected`; and how long."""
    started = time.monotonic()
    async with Client(server_params(env)) as client:
        line = await call_error(client, "get_context")
        took = time.monotonic() - started
        assert expected in line, line
        assert line.startswith("squirrel-mcp: ") and "\n" not in line
        assert await call_error(client, "save_memory", text="keeps bees on the roof") == line
        assert await call_error(client, "search_memory", query="bees") == line
    stderr = secrets_of_this_test().stderr_files[-1].read_text(encoding="utf-8")
    assert "Traceback" not in stderr and stderr.strip().splitlines() == [line]
    return line, took


def assert_no_secret_in(tmp_path: Path, service: SecretService, outputs: list[str], *more: str) -> None:
    """No passphrase (nor `more` secrets) in what the commands printed, nor in files but the keyring's."""
    secrets = [PASSPHRASE, NEW_PASSPHRASE, KEYRING_PASSWORD, *more]
    for text in outputs:
        assert not [secret for secret in secrets if secret in text], text
    scanned = 0
    for path in tmp_path.rglob("*"):
        if path.is_file() and service.keyring_files not in path.parents:
            data = path.read_bytes()
            assert not [secret for secret in secrets if secret.encode() in data], path
            scanned += 1
    assert scanned >= 3  # the vault, the keyring daemon's log, a checkpoint at least


@pytest.mark.anyio
async def test_the_server_unlocks_from_the_keychain_and_says_one_line_when_it_cannot(
    secret_service: SecretService, tmp_path: Path
) -> None:
    # A vault of its own: the block names SQUIRREL_VAULT only when it is not the default.
    env = {**secret_service.env, "SQUIRREL_VAULT": str(tmp_path / "named" / "vault.sqlite3")}
    secrets_of_this_test().add(NEW_PASSPHRASE)
    secrets_of_this_test().add(KEYRING_PASSWORD)
    outputs: list[str] = []

    made = cli({**env, "SQUIRREL_PASSPHRASE": PASSPHRASE}, "init", "--keychain", outputs=outputs)
    assert made.returncode == 0, made.stderr
    printed = made.stdout.decode()
    block = json.loads(printed[printed.index("{") :])
    entry = block["mcpServers"]["squirrel-notes"]
    # The test's vault is not the default one, so its path is the only thing the env holds.
    assert entry["env"] == {"SQUIRREL_VAULT": env["SQUIRREL_VAULT"]}
    assert "SQUIRREL_PASSPHRASE" not in printed and "placeholder" not in printed

    async with Client(server_params(env)) as client:
        saved = await call(client, "save_memory", text="Keeps bees on the roof")
        found = await call(client, "search_memory", query="bees")
    assert [memory["id"] for memory in found["results"]] == [saved["memory"]["id"]]

    # The passphrase changed: read from the keychain, the new one written back to it.
    changed = cli({**env, "SQUIRREL_NEW_PASSPHRASE": NEW_PASSPHRASE}, "passphrase", outputs=outputs)
    assert changed.returncode == 0, changed.stderr
    assert "holds the new passphrase" in changed.stdout.decode()
    async with Client(server_params(env)) as client:
        found = await call(client, "search_memory", query="bees")
    assert [memory["id"] for memory in found["results"]] == [saved["memory"]["id"]]

    forgot = cli(env, "keychain", "forget", outputs=outputs)
    assert (
        forgot.returncode == 0
        and f"Removed: {SERVICE} / passphrase of the vault at" in forgot.stdout.decode()
    )
    line, _ = await every_call_says(env, "SQUIRREL_PASSPHRASE is not set")
    assert "nor is it in the keychain" in line and "squirrel-mcp keychain store" in line

    stored = cli({**env, "SQUIRREL_PASSPHRASE": NEW_PASSPHRASE}, "keychain", "store", outputs=outputs)
    assert stored.returncode == 0, stored.stderr
    secret_service.lock()
    line, took = await every_call_says(env, "the keychain is locked")
    assert "set SQUIRREL_PASSPHRASE" in line and took < TIMEOUT + START_WITHIN

    # A keyring daemon that never answers (as one waiting on an unlock prompt): the bound holds.
    os.kill(secret_service.keyring_process.pid, signal.SIGSTOP)
    try:
        line, took = await every_call_says(env, f"the keychain did not answer within {TIMEOUT:g} s")
        assert TIMEOUT <= took < TIMEOUT + START_WITHIN
    finally:
        os.kill(secret_service.keyring_process.pid, signal.SIGCONT)

    assert_no_secret_in(tmp_path, secret_service, outputs)


def test_doctor_says_where_the_passphrase_came_from(secret_service: SecretService, tmp_path: Path) -> None:
    env = secret_service.env
    secrets_of_this_test().add(NEW_PASSPHRASE)
    outputs: list[str] = []
    made = cli({**env, "SQUIRREL_PASSPHRASE": PASSPHRASE}, "init", "--keychain", outputs=outputs)
    assert made.returncode == 0, made.stderr

    environment = keychain_line(cli({**env, "SQUIRREL_PASSPHRASE": PASSPHRASE}, "doctor", outputs=outputs))
    assert environment == "✓ keychain: not asked: the passphrase comes from SQUIRREL_PASSPHRASE"

    good = cli(env, "doctor", outputs=outputs)
    assert keychain_line(good).startswith("✓ keychain: the passphrase comes from entry squirrel-mcp / ")
    assert keychain_line(good).endswith("and it unlocks the account")
    assert "✓ passphrase: unlocks the account" in good.stdout.decode()
    status = cli(env, "keychain", "status", outputs=outputs)
    assert status.returncode == 0 and status.stdout.decode().strip() == keychain_line(good)

    # Changed elsewhere (the environment's passphrase wins, so this machine's entry is not renewed).
    keep = {**env, "SQUIRREL_PASSPHRASE": PASSPHRASE, "SQUIRREL_NEW_PASSPHRASE": NEW_PASSPHRASE}
    renewed = cli(
        {**keep, "PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring"}, "passphrase", outputs=outputs
    )
    assert renewed.returncode == 0, renewed.stderr
    stale = cli(env, "doctor", outputs=outputs)
    assert stale.returncode == 1
    assert keychain_line(stale).startswith("✗ keychain: the passphrase in the keychain entry")
    assert "does not unlock" in keychain_line(stale)
    assert keychain_line(stale).endswith("→ run `squirrel-mcp keychain store`")
    refused = cli({**env, "SQUIRREL_PASSPHRASE": PASSPHRASE}, "keychain", "store", outputs=outputs)
    assert refused.returncode == 1 and b"does not unlock" in refused.stderr

    cli(env, "keychain", "forget", outputs=outputs)
    absent = keychain_line(cli(env, "doctor", outputs=outputs))
    assert absent.startswith("✓ keychain: no entry squirrel-mcp / passphrase of the vault at")
    none = cli({**env, "PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring"}, "doctor", outputs=outputs)
    assert keychain_line(none).startswith("✓ keychain: none: no keychain is usable on this machine")

    assert_no_secret_in(tmp_path, secret_service, outputs)


def converse(env: dict[str, str], argv: list[str], script: list[tuple[bytes, str]]) -> tuple[int, str]:
    """Run `squirrel-mcp ARGV` on a pseudo-terminal, typing each answer once its prompt is shown."""
    pending = list(script)

    def answer(output: bytes) -> str | None:
        return pending.pop(0)[1] if pending and output.endswith(pending[0][0]) else None

    return terminal.converse(["-m", "squirrel_mcp", *argv], env, answer, within=START_WITHIN)


def test_init_on_a_terminal_offers_the_keychain(secret_service: SecretService, tmp_path: Path) -> None:
    env = secret_service.env
    script = [(b"[Y/n] ", ""), (b"Passphrase: ", PASSPHRASE), (b"Passphrase again: ", PASSPHRASE)]
    code, output = converse(env, ["init"], script)
    assert code == 0, output
    assert "kept in this machine's keychain" in output and "SQUIRREL_PASSPHRASE" not in output
    assert PASSPHRASE not in output
    outputs = [output]
    status = cli(env, "keychain", "status", outputs=outputs)
    assert status.returncode == 0 and "and it unlocks the account" in status.stdout.decode()
    # Declined: today's block, with the placeholder, and nothing kept.
    cli(env, "keychain", "forget", outputs=outputs)
    other = {**env, "SQUIRREL_VAULT": str(tmp_path / "other" / "vault.sqlite3")}
    code, output = converse(other, ["init"], [(b"[Y/n] ", "n"), *script[1:]])
    assert code == 0, output
    assert '"SQUIRREL_PASSPHRASE": "<your passphrase>"' in output
    absent = cli(other, "keychain", "status", outputs=outputs)
    assert "no entry" in absent.stdout.decode()
    assert_no_secret_in(tmp_path, secret_service, [*outputs, output])


@pytest.mark.anyio
async def test_the_sync_servers_api_key_is_kept_in_the_keychain_too(
    secret_service: SecretService, tmp_path: Path
) -> None:
    with start_sync_server(f"sqlite:///{tmp_path}/sync-db/sync.sqlite3", log=tmp_path / "sync.log") as sync:
        env = {k: v for k, v in secret_service.env.items() if k != "SQUIRREL_VAULT"}
        env["SQUIRREL_API_BASE_URL"] = sync.url
        outputs: list[str] = []
        given = {**env, "SQUIRREL_API_KEY": sync.api_key, "SQUIRREL_PASSPHRASE": PASSPHRASE}
        made = cli(given, "init", "--keychain", outputs=outputs)
        assert made.returncode == 0, made.stderr
        printed = made.stdout.decode()
        block = json.loads(printed[printed.index("{") :])
        assert block["mcpServers"]["squirrel-notes"]["env"] == {"SQUIRREL_API_BASE_URL": sync.url}

        async with Client(server_params(env)) as client:
            saved = await call(client, "save_memory", text="Keeps bees on the roof")
            found = await call(client, "search_memory", query="bees")
        assert [memory["id"] for memory in found["results"]] == [saved["memory"]["id"]]

        forgot = cli(env, "keychain", "forget", outputs=outputs)
        assert forgot.stdout.decode().count("Removed: ") == 2
        line, _ = await every_call_says(env, "SQUIRREL_API_KEY is not, nor is it in the keychain")
        assert "squirrel-mcp keychain store" in line
    assert_no_secret_in(tmp_path, secret_service, outputs, sync.api_key)


@pytest.mark.anyio
async def test_a_hook_unlocks_through_the_keychain_and_starts_the_memory_process(
    secret_service: SecretService, tmp_path: Path
) -> None:
    # squirrel-mcp hook runs in the host's environment: no SQUIRREL_PASSPHRASE, the keychain's entry.
    env = {**secret_service.env, "SQUIRREL_MEMORY_CACHE_DIR": secret_service.env["XDG_CACHE_HOME"]}
    outputs: list[str] = []
    made = cli({**env, "SQUIRREL_PASSPHRASE": PASSPHRASE}, "init", "--keychain", outputs=outputs)
    assert made.returncode == 0, made.stderr
    text = "The user's keychain test memory is about hooks"
    own = {**env, "SQUIRREL_PASSPHRASE": PASSPHRASE, "SQUIRREL_MCP_SHARED": "0"}
    async with Client(server_params(own)) as host:
        saved = (await call(host, "save_memory", text=text, entity="user", category="fact"))["memory"]
    hooked = {**env, "SQUIRREL_MCP_SHARED_IDLE": "600", "SQUIRREL_HOOK_DEADLINE": str(START_WITHIN)}
    given = json.dumps({"cwd": str(tmp_path), "hook_event_name": "SessionStart", "source": "startup"})
    done = subprocess.run(
        [sys.executable, "-m", "squirrel_mcp", "hook", "session-start", "--host", "claude-code"],
        input=given.encode(),
        env={"PATH": os.environ["PATH"], **hooked},
        capture_output=True,
        timeout=START_WITHIN * 2,
        check=False,
    )
    outputs += [done.stdout.decode(), done.stderr.decode()]
    pid = memory_process(hooked)
    try:
        assert done.returncode == 0 and done.stderr == b"", done.stderr
        briefing = json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"]
        assert saved["id"] in briefing and text in briefing
        assert pid is not None
    finally:
        for running in memory_processes(hooked):
            os.kill(running, signal.SIGKILL)
    assert_no_secret_in(tmp_path, secret_service, outputs)
