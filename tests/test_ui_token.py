"""`squirrel-mcp ui` hands its one-time token to the browser on no command line another user can read.

The real `squirrel-mcp ui` (without --no-browser) opens a stand-in browser named
by BROWSER: a script that records how it was started, waits a moment as a slow
browser does, then opens what it was given as a browser would (the forwarding
file, then the page). Meanwhile another user (`nobody`, through setpriv, as the
review did) reads every process's /proc/PID/cmdline, and tries to open any file
a command line names. The token must be in none of them, the other user must not
be able to read the file, and the stand-in must still get in.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.ui_support import PROCESS_TIMEOUT, create_vault, running_ui

# Every test here starts `squirrel-mcp ui` and a stand-in browser in processes of their own.
pytestmark = pytest.mark.process

# How long the stand-in waits before it reads its file: a slow browser start, the review's window.
SLOW_START = 1.0

STANDIN = '''#!{python}
"""A stand-in browser: records its argv, then opens the file it was given as a browser would."""
import html, http.client, json, os, re, sys, time
from urllib.parse import unquote, urlsplit

report = {{"argv": sys.argv}}
time.sleep(float(os.environ["STANDIN_DELAY"]))
try:
    target = sys.argv[-1]
    if not target.startswith("file://"):
        raise ValueError("not given a file")
    path = unquote(urlsplit(target).path)
    report["path"] = path
    report["mode"] = os.stat(path).st_mode & 0o777
    report["dir_mode"] = os.stat(os.path.dirname(path)).st_mode & 0o777
    if os.environ.get("STANDIN_OPEN") == "1":
        with open(path, encoding="utf-8") as file:
            forward = html.unescape(re.search(r'content="0;url=([^"]+)"', file.read()).group(1))
        parts = urlsplit(forward)
        # As Chromium and Firefox do, the page's *.localhost name is resolved here, to loopback.
        assert parts.hostname.endswith(".localhost"), parts.hostname
        connection = http.client.HTTPConnection("127.0.0.1", parts.port, timeout=30)
        connection.request("GET", f"{{parts.path}}?{{parts.query}}", headers={{"Host": parts.netloc}})
        answer = connection.getresponse()
        answer.read()
        report["redeemed"] = answer.status
        report["file_after_redeeming"] = os.path.exists(path)
        cookie = answer.getheader("set-cookie", "").split(";")[0]
        headers = {{"Host": parts.netloc, "Cookie": cookie}}
        connection.request("GET", answer.getheader("location", "/"), headers=headers)
        answer = connection.getresponse()
        report["page"] = answer.status
        report["page_text"] = answer.read().decode()[:2000]
except Exception as error:
    report["error"] = repr(error)
with open(os.environ["STANDIN_REPORT"], "w", encoding="utf-8") as out:
    json.dump(report, out)
'''

# Run as `nobody`: every command line on the machine, and any file one of them names, read in a loop.
WATCHER = r"""
import json, os, select, sys
from urllib.parse import unquote, urlsplit
seen, files, ready = set(), {}, False
while not select.select([sys.stdin], [], [], 0.001)[0]:
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as file:
                line = file.read()
        except OSError:
            continue
        if line in seen:
            continue
        seen.add(line)
        for arg in line.split(b"\0"):
            if arg.startswith(b"file://"):
                path = unquote(urlsplit(arg.decode()).path)
                try:
                    with open(path, encoding="utf-8") as file:
                        files[path] = file.read()
                except OSError as error:
                    files[path] = type(error).__name__
    if not ready:
        ready = True
        print("ready", flush=True)
lines = [line.decode(errors="replace") for line in seen]
print(json.dumps({"uid": os.getuid(), "cmdlines": lines, "files": files}))
"""
SETPRIV = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]


def standin_browser(tmp_path: Path) -> Path:
    script = tmp_path / "standin-browser"
    script.write_text(STANDIN.format(python=sys.executable), encoding="utf-8")
    script.chmod(0o700)
    return script


def browser_env(
    vault_env: dict[str, str], tmp_path: Path, runtime: Path | None, *, opens: bool = True
) -> dict[str, str]:
    """The vault's environment with the stand-in as BROWSER, TMPDIR in tmp_path, and `runtime` if any."""
    (tmp_path / "tmp").mkdir(mode=0o700)
    env = {
        **vault_env,
        "BROWSER": str(standin_browser(tmp_path)),
        "STANDIN_REPORT": str(tmp_path / "standin.json"),
        "STANDIN_DELAY": str(SLOW_START),
        "STANDIN_OPEN": "1" if opens else "0",
        "TMPDIR": str(tmp_path / "tmp"),
        # No display: webbrowser must not find a real browser before the stand-in.
        "DISPLAY": "",
        "WAYLAND_DISPLAY": "",
    }
    # Unset: empty, as no runtime directory at all (not the suite's own channel directory).
    env["XDG_RUNTIME_DIR"] = "" if runtime is None else str(runtime)
    return env


def standin_report(tmp_path: Path) -> dict[str, Any]:
    path = tmp_path / "standin.json"
    deadline = time.monotonic() + PROCESS_TIMEOUT
    while not path.exists():
        assert time.monotonic() < deadline, "the stand-in browser was never started"
        time.sleep(0.05)
    time.sleep(0.1)  # written in one go, but let it be closed
    report: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return report


def left_in(directory: Path) -> list[Path]:
    """What is left in `directory` besides the channels' directory (a memory process served the page)."""
    channels = ("squirrel-mcp", f"squirrel-mcp-{os.getuid()}")
    return [path for path in directory.iterdir() if path.name not in channels]


def assert_got_in_through_a_file(report: dict[str, Any], token: str) -> Path:
    """The stand-in was given a file (no token on its command line), owner-only, and got in; its path."""
    assert "error" not in report, report
    assert all(token not in arg for arg in report["argv"])
    assert report["mode"] == 0o600
    assert report["dir_mode"] & 0o077 == 0
    # Redeemed: a session and the list; the file was gone by the time the redirect arrived.
    assert (report["redeemed"], report["page"]) == (303, 200)
    assert report["file_after_redeeming"] is False
    assert "Memories" in report["page_text"]
    return Path(report["path"])


@pytest.mark.parametrize("runtime", ["private", "open to others", "unset"])
def test_the_browser_gets_in_through_an_owner_only_file_deleted_once_used(
    vault_env: dict[str, str], tmp_path: Path, runtime: str
) -> None:
    create_vault(vault_env)
    runtime_dir = tmp_path / "runtime"
    runtime_dir.mkdir(mode=0o700)
    if runtime == "open to others":
        runtime_dir.chmod(0o755)
    env = browser_env(vault_env, tmp_path, None if runtime == "unset" else runtime_dir)
    with running_ui(env, tmp_path, browser=True) as ui:
        path = assert_got_in_through_a_file(standin_report(tmp_path), ui.token)
        if runtime == "private":
            assert path.parent == runtime_dir
        else:
            # A runtime directory others may enter is not used: a private temporary one is.
            assert path.parent.parent == tmp_path / "tmp"
            assert not path.parent.exists()
        # The token opened once: the file's address is spent.
        assert ui.request("GET", f"/?token={ui.token}")[0] == 403
    assert left_in(runtime_dir) == []
    assert left_in(tmp_path / "tmp") == []


def test_a_file_never_opened_is_deleted_when_the_page_stops(
    vault_env: dict[str, str], tmp_path: Path
) -> None:
    create_vault(vault_env)
    runtime_dir = tmp_path / "runtime"
    runtime_dir.mkdir(mode=0o700)
    env = browser_env(vault_env, tmp_path, runtime_dir, opens=False)
    with running_ui(env, tmp_path, browser=True):
        report = standin_report(tmp_path)
        assert "error" not in report, report
        assert Path(report["path"]).parent == runtime_dir
        assert Path(report["path"]).exists()
    assert left_in(runtime_dir) == []


def nobody_python() -> str | None:
    """A Python interpreter the `nobody` user can run (this one may sit in root's home), or None."""
    for candidate in (sys.executable, "/usr/bin/python3"):
        try:
            done = subprocess.run(
                [*SETPRIV, candidate, "-c", "pass"], capture_output=True, timeout=60, check=False, cwd="/"
            )
        except OSError:
            continue
        if done.returncode == 0:
            return candidate
    return None


def test_the_token_is_on_no_command_line_another_user_can_read(
    vault_env: dict[str, str], tmp_path: Path
) -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("watching as another user needs root and setpriv (util-linux)")
    python = nobody_python()
    if python is None:
        pytest.skip("no Python interpreter the nobody user can run")
    peek = f"open('/proc/{os.getpid()}/cmdline', 'rb').read()"
    if subprocess.run([*SETPRIV, python, "-c", peek], capture_output=True, check=False, cwd="/").returncode:
        pytest.skip("/proc hides other users' processes here (hidepid): there is nothing to watch")
    create_vault(vault_env)
    runtime_dir = tmp_path / "runtime"
    runtime_dir.mkdir(mode=0o700)
    env = browser_env(vault_env, tmp_path, runtime_dir)
    watcher = subprocess.Popen(
        [*SETPRIV, python, "-c", WATCHER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd="/",
    )
    try:
        assert watcher.stdout is not None and watcher.stdout.readline() == "ready\n"
        with running_ui(env, tmp_path, browser=True) as ui:
            report = standin_report(tmp_path)
            token = ui.token
        seen_out, errors = watcher.communicate(input="", timeout=PROCESS_TIMEOUT)
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()
    assert watcher.returncode == 0, errors
    seen = json.loads(seen_out)
    assert seen["uid"] != 0
    # It did watch: it saw the page's command line and the stand-in's.
    assert any("squirrel_mcp\0ui" in line for line in seen["cmdlines"])
    browser_lines = [line for line in seen["cmdlines"] if "standin-browser" in line]
    assert browser_lines
    # The token was in no command line (the review read it in the browser's).
    assert [line for line in seen["cmdlines"] if token in line] == []
    # The stand-in got in all the same, through a file whose name the other user saw but could not open.
    path = assert_got_in_through_a_file(report, token)
    assert all(path.as_uri() in line for line in browser_lines)
    # Only what the page's processes name counts: pip's file:// index on another process's command
    # line (another test installing beside this one) is not the page's.
    ours = [line for line in seen["cmdlines"] if "standin-browser" in line or "squirrel_mcp\0ui" in line]
    named = {
        name: error
        for name, error in seen["files"].items()
        if any(Path(name).as_uri() in line for line in ours)
    }
    assert named == {str(path): "PermissionError"}
    assert stat.S_IMODE(runtime_dir.stat().st_mode) == 0o700
