"""What gets installed: both wheels' metadata, and fresh virtual environments that really work.

These build wheels and create virtual environments with pip, so they take a minute
or two; they are what proves the packaging, so they run in every `nox -s tests`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import venv
import zipfile
from email.parser import Parser
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from squirrel_mcp import __version__
from tests.conftest import PASSPHRASE, call, default_vault, host_env

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent


def run(*argv: str | Path) -> str:
    result = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=900, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def wheel_metadata(wheel: Path) -> tuple[str, list[str]]:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(archive.read(name).decode())
    return metadata["Version"], metadata.get_all("Requires-Dist") or []


def test_both_wheels_carry_one_version_and_pin_each_other_exactly(tmp_path: Path) -> None:
    for source in (ROOT, ROOT / "embeddings_plugin"):
        run(sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", tmp_path, source)
    (base,) = tmp_path.glob("squirrel_mcp-*.whl")
    (plugin,) = tmp_path.glob("squirrel_mcp_embeddings-*.whl")
    base_version, base_requires = wheel_metadata(base)
    plugin_version, plugin_requires = wheel_metadata(plugin)
    assert base_version == plugin_version == __version__
    assert f"squirrel-mcp-embeddings=={__version__}; extra == 'embeddings'" in base_requires
    assert f"squirrel-mcp=={__version__}" in plugin_requires


def fresh_venv(path: Path) -> Path:
    venv.create(path, with_pip=True)
    return path / "bin"


async def round_trip(bin_dir: Path, tmp_path: Path, ranking: str = "lexical") -> None:
    """The venv's own squirrel-mcp script, over stdio: save, then find it, ranked as expected."""
    env = {
        # The default vault of this XDG_DATA_HOME: the server makes it at its first start.
        **default_vault(tmp_path / "data"),
        "SQUIRREL_PASSPHRASE": PASSPHRASE,
        "SQUIRREL_MEMORY_CACHE_DIR": str(tmp_path / "cache"),
    }
    server = StdioServerParameters(command=str(bin_dir / "squirrel-mcp"), env=host_env(env))
    async with Client(server) as client:
        await call(client, "save_memory", text="Installed from a fresh environment")
        found = await call(client, "search_memory", query="fresh environment")
        # The model loads in the background: searches are lexical until it is ready.
        deadline = time.monotonic() + 60
        while found["ranking"] != ranking and time.monotonic() < deadline:
            await anyio.sleep(0.2)
            found = await call(client, "search_memory", query="fresh environment")
        assert found["total"] == 1
        assert found["ranking"] == ranking


@pytest.mark.anyio
async def test_pip_install_of_the_checkout_gives_a_working_server(tmp_path: Path) -> None:
    bin_dir = fresh_venv(tmp_path / "venv")
    run(bin_dir / "pip", "install", "-q", ROOT)
    assert run(bin_dir / "squirrel-mcp", "--version").strip() == f"squirrel-mcp {__version__}"
    await round_trip(bin_dir, tmp_path)


@pytest.mark.anyio
async def test_locked_install_of_both_distributions_gives_a_working_server(tmp_path: Path) -> None:
    bin_dir = fresh_venv(tmp_path / "venv")
    # The documented install from a checkout: the hashed lock, then both distributions.
    run(bin_dir / "pip", "install", "-q", "--require-hashes", "-r", ROOT / "requirements" / "runtime.txt")
    run(bin_dir / "pip", "install", "-q", "--no-deps", ROOT, ROOT / "embeddings_plugin")
    run(bin_dir / "python", "-c", "import squirrel_mcp_embeddings")
    await round_trip(bin_dir, tmp_path, ranking="hybrid")


EXAMPLE_RANKER = ROOT / "docs" / "examples" / "squirrel-mcp-reverse-ranker"
RANKER_TEXTS = ["Grows chillies on the balcony", "Chillies and basil on the balcony", "Dries chillies"]


async def search_and_tools(
    bin_dir: Path, tmp_path: Path, *, save: bool, ranking: str = "lexical"
) -> tuple[dict[str, Any], str]:
    """A search through the venv's own server (as `ranking` once it ranks so), and its tool list as JSON."""
    env = {**default_vault(tmp_path / "ranked"), "SQUIRREL_PASSPHRASE": PASSPHRASE}
    server = StdioServerParameters(command=str(bin_dir / "squirrel-mcp"), env=host_env(env))
    async with Client(server) as client:
        if save:
            for text in RANKER_TEXTS:
                await call(client, "save_memory", text=text, category="fact")
        found = await call(client, "search_memory", query="chillies balcony basil")
        # A plugin's startup hook runs in a thread of its own after the handshake, and the
        # ranker answers None (lexical) until it has: on a loaded machine the first search
        # can come first (the CI failure of test_installing_a_ranker_distribution_is_the_opt_in).
        deadline = time.monotonic() + 60
        while found["ranking"] != ranking and time.monotonic() < deadline:
            await anyio.sleep(0.2)
            found = await call(client, "search_memory", query="chillies balcony basil")
        tools = (await client.list_tools()).model_dump(mode="json")
    return found, json.dumps(tools, sort_keys=True)


@pytest.mark.anyio
async def test_installing_a_ranker_distribution_is_the_opt_in(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    for source in (ROOT, EXAMPLE_RANKER):
        run(sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", wheels, source)
    (base,) = wheels.glob("squirrel_mcp-*.whl")
    (ranker,) = wheels.glob("squirrel_mcp_reverse_ranker-*.whl")
    bin_dir = fresh_venv(tmp_path / "venv")
    run(bin_dir / "pip", "install", "-q", "--require-hashes", "-r", ROOT / "requirements" / "runtime.txt")
    run(bin_dir / "pip", "install", "-q", "--no-deps", base)

    lexical, base_tools = await search_and_tools(bin_dir, tmp_path, save=True)
    assert lexical["ranking"] == "lexical" and lexical["total"] == 3
    assert all(hit["semanticScore"] is None for hit in lexical["results"])

    run(bin_dir / "pip", "install", "-q", "--no-deps", ranker)
    ranked, ranker_tools = await search_and_tools(bin_dir, tmp_path, save=False, ranking="hybrid")
    assert ranked["ranking"] == "hybrid" and ranked["total"] == 3
    # The toy ranker's order: weakest word match first, and its "semantic" score is 1 - lexicalScore.
    assert [h["id"] for h in ranked["results"]] == [h["id"] for h in reversed(lexical["results"])]
    assert all(h["semanticScore"] == pytest.approx(1 - h["lexicalScore"]) for h in ranked["results"])

    run(bin_dir / "pip", "uninstall", "-q", "-y", "squirrel-mcp-reverse-ranker")
    again, again_tools = await search_and_tools(bin_dir, tmp_path, save=False)
    assert again["ranking"] == "lexical"
    assert [h["id"] for h in again["results"]] == [h["id"] for h in lexical["results"]]
    assert all(hit["semanticScore"] is None for hit in again["results"])

    assert ranker_tools == base_tools == again_tools
