"""Projects on the command line: search/list/show read every project unless told, `projects` counts
them and says where this folder stands, and export -> import keeps each revision's project.

Everything goes through real CLI processes on a vault the real server filled; where the directory
matters, the test makes real git repositories.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.conftest import call, run_cli, secrets_of_this_test, server_params

API, WEB = "github.com/acme/api", "github.com/acme/web"

needs_git = pytest.mark.skipif(
    shutil.which("git") is None, reason="the git CLI is not installed: these tests make real repositories"
)


async def _fill(env: dict[str, str]) -> dict[str, str]:
    """Memories in two projects and none, one moved from API to WEB: their ids by name."""
    async with Client(server_params(env)) as client:

        async def save(text: str, **arguments: Any) -> str:
            saved = await call(client, "save_memory", text=text, **arguments)
            return str(saved["memory"]["id"])

        ids = {
            "api": await save("Runs the tests with pytest", project=API),
            "web": await save("Runs the tests with vitest", project=WEB),
            "everywhere": await save("Likes short names for tests", category="preference"),
            "moved": await save("Deploys the tests on Fridays", project=API),
        }
        await call(client, "update_memory", id=ids["moved"], project=WEB, reason="the web team deploys")
    return ids


def _json(result: subprocess.CompletedProcess[bytes]) -> Any:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _projects_of(listed: dict[str, Any], ids: dict[str, str]) -> dict[str, str | None]:
    """Each listed memory's project, by the test's name for it."""
    names = {memory_id: name for name, memory_id in ids.items()}
    return {names[memory["id"]]: memory["project"] for memory in listed["memories"]}


@pytest.mark.anyio
async def test_list_and_search_read_every_project_unless_told(vault_env: dict[str, str]) -> None:
    ids = await _fill(vault_env)
    everything = {"api": API, "web": WEB, "everywhere": None, "moved": WEB}
    # A person sees every project by default, where an agent's session sees its own and none.
    assert _projects_of(_json(run_cli(vault_env, "list", "--json")), ids) == everything
    assert _projects_of(_json(run_cli(vault_env, "list", "--project", "*", "--json")), ids) == everything
    web = _json(run_cli(vault_env, "list", "--project", WEB, "--json"))
    assert _projects_of(web, ids) == {"web": WEB, "moved": WEB, "everywhere": None}
    none = _json(run_cli(vault_env, "list", "--project", "", "--json"))
    assert _projects_of(none, ids) == {"everywhere": None}
    # The option is the tool's own argument: the same answer as the tool's.
    async with Client(server_params(vault_env)) as client:
        assert web == await call(client, "list_memories", project=WEB)
        by_tool = await call(client, "search_memory", query="tests", project=API)

    found = _json(run_cli(vault_env, "search", "tests", "--project", API, "--json"))
    assert [hit["id"] for hit in found["results"]] == [hit["id"] for hit in by_tool["results"]]
    assert {hit["id"] for hit in found["results"]} == {ids["api"], ids["everywhere"]}
    every = _json(run_cli(vault_env, "search", "tests", "--json"))
    assert {hit["id"] for hit in every["results"]} == set(ids.values())

    lines = run_cli(vault_env, "list").stdout.decode().splitlines()
    assert any(line.startswith(ids["api"]) and f"  in {API} · user: Runs the tests" in line for line in lines)
    assert any(line.startswith(ids["everywhere"]) and "  no project · user: Likes" in line for line in lines)
    text = run_cli(vault_env, "search", "vitest").stdout.decode()
    assert text.startswith(f"{ids['web']}  user · note · in {WEB} · score ")


@pytest.mark.anyio
async def test_a_project_that_is_no_name_is_the_tools_refusal(vault_env: dict[str, str]) -> None:
    await _fill(vault_env)
    secret = "client\nacme-secret"
    secrets_of_this_test().add(secret)
    for command in (["list"], ["search", "tests"]):
        refused = run_cli(vault_env, *command, "--project", secret)
        assert refused.returncode == 1
        [line] = refused.stderr.decode().splitlines()
        assert (
            line.startswith("squirrel-mcp: invalid arguments for ")
            and "`project` must be a single line" in line
        )
        assert "acme-secret" not in line and refused.stdout == b""


@pytest.mark.anyio
async def test_show_says_where_a_memory_is_and_where_it_moved(vault_env: dict[str, str]) -> None:
    ids = await _fill(vault_env)
    block = run_cli(vault_env, "show", ids["moved"]).stdout.decode()
    assert f"project   {WEB}" in block.splitlines()
    history = block[block.index("history") :].splitlines()[1:]
    assert len(history) == 2
    assert history[0].endswith(f"created    in {API} · Deploys the tests on Fridays")
    assert history[1].endswith(f"corrected  moved to {WEB} · reason: the web team deploys")
    async with Client(server_params(vault_env)) as client:
        await call(client, "update_memory", id=ids["api"], project="", text="Uses pytest")
    everywhere = run_cli(vault_env, "show", ids["api"]).stdout.decode()
    assert "project   none (it holds everywhere)" in everywhere.splitlines()
    moved = everywhere[everywhere.index("history") :].splitlines()[2]
    assert moved.endswith("corrected  changed text · moved to no project · Uses pytest")


# --- `squirrel-mcp projects` --------------------------------------------------------------------


def _git(cwd: Path, *args: str) -> None:
    """Run git with none of this machine's config (nor the suite's) read."""
    env = {"PATH": os.environ["PATH"], "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, check=False)
    assert done.returncode == 0, done.stderr


def _repository(path: Path, origin: str | None) -> Path:
    """A git work tree at `path`, with `origin` as its remote; its `src` folder."""
    (path / "src").mkdir(parents=True)
    _git(path, "init", "-q")
    if origin is not None:
        _git(path, "remote", "add", "origin", origin)
    return path / "src"


def _in_folder(vault_env: dict[str, str]) -> dict[str, str]:
    """The environment without SQUIRREL_PROJECT: the current directory says."""
    return {key: value for key, value in vault_env.items() if key != "SQUIRREL_PROJECT"}


@needs_git
@pytest.mark.anyio
async def test_projects_counts_each_and_says_where_this_folder_stands(
    vault_env: dict[str, str], tmp_path: Path
) -> None:
    await _fill(vault_env)
    env = _in_folder(vault_env)
    api_src = _repository(tmp_path / "checkouts" / "api", "git@github.com:acme/api.git")
    # A worktree of it: the same project.
    _git(
        api_src,
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@example.com",
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "1",
    )
    worktree = tmp_path / "checkouts" / "api-fix"
    _git(api_src, "worktree", "add", "-q", str(worktree))
    bare = _repository(tmp_path / "checkouts" / "scratch", None)
    folder = tmp_path / "notes"
    folder.mkdir()
    Path(env["HOME"]).mkdir(exist_ok=True)

    answer = _json(run_cli(env, "projects", "--json", cwd=api_src))
    # The counts are get_context's: those with none first, then the largest.
    async with Client(server_params(vault_env)) as client:
        context = await call(client, "get_context", project="*")
    assert answer["projects"] == context["projects"]
    assert answer["projects"] == [
        {"project": None, "count": 1},
        {"project": WEB, "count": 2},
        {"project": API, "count": 1},
    ]
    assert answer["here"] == {"project": API, "from": "this folder"}

    table = run_cli(env, "projects", cwd=api_src)
    assert table.returncode == 0, table.stderr
    assert table.stdout.decode().splitlines() == [
        "memories  project",
        "       1  (no project: they hold everywhere)",
        f"       2  {WEB}",
        f"       1  {API}  ← here",
        f"here: {API} (from this folder)",
    ]

    # A worktree is its repository's project; a repository without a remote is its folder; a plain
    # folder is its path; the home directory is no project.
    heres = {
        path: _json(run_cli(env, "projects", "--json", cwd=path))["here"]["project"]
        for path in (worktree, bare, folder, Path(env["HOME"]))
    }
    assert heres == {
        worktree: API,
        bare: str(bare.parent.resolve()),
        folder: str(folder.resolve()),
        Path(env["HOME"]): None,
    }
    home = run_cli(env, "projects", cwd=Path(env["HOME"])).stdout.decode().splitlines()
    assert home[1].endswith("(no project: they hold everywhere)  ← here")
    assert home[-1] == (
        "here: no project (from this folder): a host started here reads the memories with no project"
    )

    named = run_cli({**env, "SQUIRREL_PROJECT": "the notes"}, "projects", cwd=api_src)
    assert named.stdout.decode().splitlines()[-1] == "here: the notes (set by SQUIRREL_PROJECT)"


def test_projects_says_why_this_folder_names_no_project_without_its_value(vault_env: dict[str, str]) -> None:
    assert run_cli(vault_env, "init").returncode == 0
    secret = "client\nacme-secret"
    secrets_of_this_test().add(secret)
    refused = run_cli({**vault_env, "SQUIRREL_PROJECT": secret}, "projects")
    assert refused.returncode == 1
    lines = refused.stdout.decode().splitlines()
    assert lines[:2] == ["memories  project", "       0  (no memories yet)"]
    assert lines[2].startswith("here: no project can be worked out (SQUIRREL_PROJECT: ")
    assert "acme-secret" not in refused.stdout.decode() + refused.stderr.decode()


# --- export and import --------------------------------------------------------------------------


def _by_id(export: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return {memory["id"]: memory["revisions"] for memory in export["memories"]}


@pytest.mark.anyio
async def test_export_then_import_keeps_every_revisions_project(
    vault_env: dict[str, str], tmp_path: Path
) -> None:
    ids = await _fill(vault_env)
    first = tmp_path / "first.json"
    assert run_cli(vault_env, "export", "-o", str(first)).returncode == 0
    exported = _by_id(json.loads(first.read_text()))
    # The history holds each revision's project: the move shows.
    assert [revision["project"] for revision in exported[ids["moved"]]] == [API, WEB]
    assert [revision["project"] for revision in exported[ids["everywhere"]]] == [None]

    elsewhere = {**vault_env, "SQUIRREL_VAULT": str(tmp_path / "elsewhere" / "vault.sqlite3")}
    imported = run_cli(elsewhere, "import", str(first), "--create")
    assert imported.returncode == 0, imported.stderr
    again = tmp_path / "again.json"
    assert run_cli(elsewhere, "export", "-o", str(again)).returncode == 0
    assert _by_id(json.loads(again.read_text())) == exported

    # The imported vault is read by project as the first one is.
    web = _json(run_cli(elsewhere, "list", "--project", WEB, "--json"))
    assert _projects_of(web, ids) == {"web": WEB, "moved": WEB, "everywhere": None}
    counts = _json(run_cli(elsewhere, "projects", "--json"))["projects"]
    assert counts == _json(run_cli(vault_env, "projects", "--json"))["projects"]
