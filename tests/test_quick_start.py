"""The README's Quick start, pasted as it is, on a machine with nothing but Python; and the model
export cache every nox session reuses, so that no session but the first one needs torch.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import needs_model
from tests.terminal import converse
from tests.test_release import figure, find_peanuts

ROOT = Path(__file__).resolve().parents[1]
FETCH = ROOT / "model" / "fetch.py"
NOT_CACHED = 3
PASSPHRASE = "quick start passphrase"
# A backstop per line: the build installs the dev lock and builds four distributions under load.
LINE_TIMEOUT = 1800


def quick_start_lines() -> list[str]:
    """The command lines of the README's Quick start, as written (its first sh block)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("\n## Quick start\n") :]
    block = section[section.index("```sh\n") + len("```sh\n") : section.index("\n```\n")]
    return [line for line in block.splitlines() if line.strip()]


def copy_of_the_checkout(dest: Path) -> Path:
    """This checkout's files as a clone would have them (tracked and new, never ignored ones)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=False,
        timeout=60,
    )
    if listed.returncode != 0:
        pytest.skip("not a git checkout: the Quick start is run on a copy of one")
    for name in filter(None, listed.stdout.decode().split("\0")):
        source = ROOT / name
        if source.is_file():  # a file deleted in the working tree is listed, but gone
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name, follow_symlinks=False)
    return dest


def import_fetch() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fetch", FETCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def machine_with_only_python(home: Path) -> dict[str, str]:
    """A fresh HOME, and a PATH with the system's Python 3.11+ and no nox; the machine's pip
    settings and the model export cache (this machine's, so the first export is not repeated)."""
    pip = {k: v for k, v in os.environ.items() if k.startswith("PIP_")}
    return {
        **pip,
        "HOME": str(home),
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "SQUIRREL_BUILD_CACHE": str(import_fetch().cache_root()),
    }


def run_line(line: str, cwd: Path, env: dict[str, str]) -> str:
    """One line of the block in bash, in `cwd`; what it printed. `init` runs on a terminal,
    where it asks for the passphrase twice (and, where a keychain answers, whether to use it)."""
    if " init" not in line:
        done = subprocess.run(
            ["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=LINE_TIMEOUT
        )
        assert done.returncode == 0, f"{line}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        return done.stdout

    answered = [0]  # the passphrase prompts answered so far

    def answer(output: bytes) -> str | None:
        if output.endswith(b"[Y/n] "):
            return "n"
        asked = output.count(b"assphrase")
        if output.endswith(b": ") and asked > answered[0]:
            answered[0] = asked
            return PASSPHRASE
        return None

    shell = "import os, sys; os.chdir(sys.argv[1]); os.execvp('bash', ['bash', '-c', sys.argv[2]])"
    code, output = converse(["-c", shell, str(cwd), line], env, answer, within=300)
    assert code == 0, f"{line}\n{output}"
    assert PASSPHRASE not in output  # never echoed
    return output.replace("\r\n", "\n")


@pytest.mark.slow
@needs_model
@pytest.mark.anyio
async def test_the_readme_quick_start_works_pasted_on_a_machine_with_only_python(tmp_path: Path) -> None:
    lines = quick_start_lines()
    assert shutil.which("nox", path="/usr/local/bin:/usr/bin:/bin") is None  # nothing but Python
    checkout = copy_of_the_checkout(tmp_path / "checkout")
    home = tmp_path / "home"
    home.mkdir()
    env = machine_with_only_python(home)
    output = ""
    for line in lines:
        started = time.monotonic()
        output = run_line(line, checkout, env)
        figure(f"quick start: {line.split('#')[0].strip()}: {time.monotonic() - started:.0f} s")

    # The model came from the export cache: the build's environment never had torch.
    assert list((checkout / ".nox").glob("build/lib/python3*/site-packages/torch")) == []
    # The last line was init: the block it printed, with the passphrase put in as the README says.
    block = json.loads(output[output.index("{") : output.rindex("}") + 1])
    server = block["mcpServers"]["squirrel-notes"]
    assert server["command"] == str(home / ".squirrel-mcp" / "bin" / "squirrel-mcp")
    env_block = {**server.get("env", {}), "SQUIRREL_PASSPHRASE": PASSPHRASE}
    found = await find_peanuts(server["command"], server["args"], {**env_block, "HOME": str(home)}, "hybrid")
    assert found["ranking"] == "hybrid", found
    assert found["results"][0]["text"] == "Is allergic to peanuts"


def fetch_cached_only(cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(FETCH), "--cached-only"],
        env={"PATH": "/usr/bin:/bin", "SQUIRREL_BUILD_CACHE": str(cache), "HOME": str(cache.parent)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_fetch_from_the_cache_only_says_when_an_export_is_needed(tmp_path: Path) -> None:
    # An empty cache: nothing to copy, and nothing is downloaded to find that out.
    done = fetch_cached_only(tmp_path / "empty")
    assert done.returncode == NOT_CACHED, done.stderr
    assert "fetch: not in the cache: " in done.stderr and "exporting it needs torch" in done.stderr
    assert not (tmp_path / "empty").exists()

    # A cached export that is not the manifest's (a torn or stale file) is not used either.
    stale = tmp_path / "stale" / "all-MiniLM-L6-v2" / "model.onnx"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"not the pinned export")
    done = fetch_cached_only(tmp_path / "stale")
    assert done.returncode == NOT_CACHED, done.stderr
    assert f"{stale} is missing or does not match the manifest" in done.stderr


def test_the_tests_install_no_system_package_when_told_not_to(tmp_path: Path) -> None:
    # gnome-keyring missing (an empty PATH finds no daemon): as root, .ci/keyring would apt-get it.
    done = subprocess.run(
        ["/bin/bash", str(ROOT / ".ci" / "keyring")],
        env={"PATH": str(tmp_path), "SQUIRREL_TEST_SYSTEM_PACKAGES": "0"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert "SQUIRREL_TEST_SYSTEM_PACKAGES=0: not installing the missing gnome-keyring or dbus" in done.stderr
    assert "installing" not in done.stderr.replace("not installing", "")


SECRET_ON_A_COMMAND_LINE = re.compile(r"\b(SQUIRREL_PASSPHRASE|SQUIRREL_NEW_PASSPHRASE|SQUIRREL_API_KEY)=\S")


def test_no_shell_command_in_the_docs_puts_a_secret_on_its_command_line() -> None:
    # A value typed on a command line lands in the shell's history: the docs ask for it on the
    # terminal, keep it in the keychain, or read it with `read -rs` instead.
    pages = [
        ROOT / "README.md",
        ROOT / "embeddings_plugin" / "README.md",
        *sorted((ROOT / "docs").rglob("*.md")),
    ]
    found = []
    for page in pages:
        for block in re.findall(r"```sh\n(.*?)```", page.read_text(encoding="utf-8"), re.DOTALL):
            for line in block.splitlines():
                command = line.split(" #")[0]
                if SECRET_ON_A_COMMAND_LINE.search(command):
                    found.append(f"{page.relative_to(ROOT)}: {command.strip()}")
    assert found == []
