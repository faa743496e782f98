"""The real `squirrel-mcp ui` process for the page's tests, and the vault read through the library."""

from __future__ import annotations

import http.client
import os
import queue
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode, urlsplit

from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.core.models import Category, Revision
from squirrel_mcp.keys import crypto
from squirrel_mcp.storage.local import LocalVault
from tests.conftest import PASSPHRASE, host_env, secrets_of_this_test

# The test vault's key derivation: cheap, so unlocking takes milliseconds, not a second.
CHEAP_KDF = crypto.KdfParams(salt=b"u" * crypto.SALT_BYTES, n=2**14)
# The printed address: the page's name (its own squirrel-<32 hex digits>.localhost), port and token.
URL = re.compile(r"http://([^:/]+):(\d+)/\?token=([A-Za-z0-9_-]+)")
# Start-up and shutdown wait this long at most: generous, the machine may be busy.
PROCESS_TIMEOUT = 120


def create_vault(env: dict[str, str]) -> None:
    """An empty vault at the environment's SQUIRREL_VAULT, unlocked by its passphrase."""
    path = Path(env["SQUIRREL_VAULT"])
    path.parent.mkdir(parents=True, exist_ok=True)
    vault = LocalVault(path, create=True)
    try:
        MemoryStore.create(vault, PASSPHRASE, CHEAP_KDF)
    finally:
        vault.close()


@contextmanager
def library(env: dict[str, str]) -> Iterator[MemoryStore]:
    """The vault unlocked through the library, as another process would (its own store, its own view)."""
    vault = LocalVault(Path(env["SQUIRREL_VAULT"]), create=False)
    try:
        yield MemoryStore.unlock(vault, PASSPHRASE)
    finally:
        vault.close()


def save(
    store: MemoryStore,
    text: str,
    *,
    entity: str = "user",
    category: Category = "note",
    tags: list[str] | None = None,
    keywords: list[str] | None = None,
) -> Revision:
    """Save a memory through the library (its text is registered as a secret of the test)."""
    secrets_of_this_test().add([text, entity, tags or [], keywords or []])
    return store.save(entity=entity, text=text, category=category, tags=tags or [], keywords=keywords or [])


@dataclass
class Ui:
    """A running `squirrel-mcp ui` and the address it printed."""

    process: subprocess.Popen[str]
    name: str
    port: int
    token: str

    @property
    def url(self) -> str:
        """The printed address, token included."""
        return f"http://{self.name}:{self.port}/?token={self.token}"

    @property
    def host(self) -> str:
        """The Host header a browser sends the page: its own name and port."""
        return f"{self.name}:{self.port}"

    @property
    def origin(self) -> str:
        """The page's own origin, as a browser sends it."""
        return f"http://{self.host}"

    def request(
        self,
        method: str,
        path: str,
        *,
        headers: dict[str, str] | None = None,
        body: bytes | None = None,
    ) -> tuple[int, dict[str, str], str]:
        """One raw HTTP request: (status, headers by lower-case name, body as text)."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=PROCESS_TIMEOUT)
        try:
            # Connected to 127.0.0.1 as a browser resolves the page's *.localhost name.
            sent = {"Host": self.host, **(headers or {})}
            connection.request(method, path, body=body, headers=sent)
            response = connection.getresponse()
            data = response.read().decode("utf-8", errors="replace")
            return response.status, {k.lower(): v for k, v in response.getheaders()}, data
        finally:
            connection.close()

    def login(self) -> str:
        """Trade the printed token for the session cookie; the Cookie header that carries it."""
        status, headers, _ = self.request("GET", urlsplit(self.url).path + "?" + urlsplit(self.url).query)
        assert status == 303, status
        return headers["set-cookie"].split(";")[0]

    def stop(self) -> int:
        """Ctrl-C, as a person stops it; the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        return self.process.wait(timeout=PROCESS_TIMEOUT)


# The header a form's POST carries.
FORM = {"content-type": "application/x-www-form-urlencoded"}


def form_body(**fields: str) -> bytes:
    """A form's fields as its POST body."""
    return urlencode(fields).encode()


def post_form(ui: Ui, path: str, headers: dict[str, str], body: bytes) -> tuple[str, str]:
    """POST a form, which answers with a redirect (303); (its address, the page there, a 200)."""
    status, answer_headers, answer = ui.request("POST", path, headers=headers, body=body)
    assert status == 303, (path, status, answer[:300])
    location = answer_headers["location"]
    status, _, page = ui.request("GET", location, headers={"Cookie": headers["Cookie"]})
    assert status == 200, (location, status)
    return location, page


def outcome_address(memory_id: str) -> re.Pattern[str]:
    """The address a refused form redirects to: the memory's page and a random key, never a value."""
    return re.compile(rf"/memory/{memory_id}\?outcome=[A-Za-z0-9_-]{{22}}")


def _first_line(stream: object) -> str:
    """The first line the process prints, or "" if it ends or takes longer than PROCESS_TIMEOUT."""
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: lines.put(stream.readline()), daemon=True).start()  # type: ignore[attr-defined]
    try:
        return lines.get(timeout=PROCESS_TIMEOUT)
    except queue.Empty:
        return ""


@contextmanager
def running_ui(env: dict[str, str], tmp_path: Path, *args: str, browser: bool = False) -> Iterator[Ui]:
    """`squirrel-mcp ui --no-browser --port 0` on the vault of `env`; stopped with Ctrl-C afterwards.

    With `browser`, without `--no-browser`: it opens the browser that `env` names in BROWSER.
    In the suite's mode (`host_env`): the vault's memory process serves the page, or, with
    SQUIRREL_MCP_SHARED=0, the command itself. Its stderr goes to tmp_path/stderr-ui-N.txt,
    which the leak scan of conftest reads.
    """
    secrets_of_this_test().add_env(env)
    env = host_env(env)
    stderr_path = tmp_path / f"stderr-ui-{len(list(tmp_path.glob('stderr-ui-*.txt')))}.txt"
    options = [] if browser else ["--no-browser"]
    with stderr_path.open("w", encoding="utf-8") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "squirrel_mcp", "ui", *options, "--port", "0", *args],
            env={"PATH": os.environ["PATH"], **env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    try:
        line = _first_line(process.stdout)
        found = URL.search(line)
        assert found is not None, f"no address printed; stderr: {stderr_path.read_text()}"
        ui = Ui(process, found.group(1), int(found.group(2)), found.group(3))
        yield ui
        assert ui.stop() in (0, 130), stderr_path.read_text()
        assert "Traceback" not in stderr_path.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()
