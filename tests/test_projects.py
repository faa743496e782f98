"""Projects through the real server over stdio: each host's session in the project of its folder.

The repositories are real ones made by the test with git (two with different `origin` remotes, a
worktree of one, one without a remote), beside a plain folder and the home directory; each host is
`squirrel-mcp` started in one of them, as a host starts it, without SQUIRREL_PROJECT unless a test
sets it. Saves land in the folder's project; reads see the session's project and the memories with
none; `project: "*"` sees every one; two hosts in two repositories on one memory process stay apart.
"""

from __future__ import annotations

import os
import signal
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from tests import test_projects_detect as detect
from tests.conftest import call, call_error, server_params
from tests.shared_support import WITHIN, memory_processes, shared_host_env
from tests.test_projects_detect import Git, make_repo, needs_git

# The real repositories' fixtures: git run with none of this machine's config.
git_env, git = detect.git_env, detect.git

pytestmark = [pytest.mark.anyio, needs_git]


class Folders:
    """The places a host may be started in, made for one test."""

    def __init__(self, git: Git, root: Path) -> None:
        self.home = root / "home"
        self.home.mkdir()
        self.api = make_repo(git, root / "code" / "api", "git@github.com:acme/api.git")
        self.web = make_repo(git, root / "code" / "web", "https://github.com/acme/web.git")
        self.worktree = root / "code" / "api-fix"
        git(self.api, "worktree", "add", "-q", str(self.worktree))
        self.local = make_repo(git, root / "code" / "scratch")
        self.plain = root / "notes"
        self.plain.mkdir()


@pytest.fixture
def folders(git: Git, tmp_path: Path) -> Folders:
    return Folders(git, tmp_path)


@pytest.fixture
def env(vault_env: dict[str, str], folders: Folders) -> dict[str, str]:
    """The suite's vault, its hosts placed by their folder (SQUIRREL_PROJECT unset), HOME the test's."""
    chosen = {key: value for key, value in vault_env.items() if key != "SQUIRREL_PROJECT"}
    chosen["HOME"] = str(folders.home)
    return chosen


def host(env: dict[str, str], folder: Path) -> Client:
    """A host's `squirrel-mcp`, started in `folder`."""
    return Client(server_params(env).model_copy(update={"cwd": str(folder)}))


async def save(client: Client, text: str, **fields: Any) -> dict[str, Any]:
    memory: dict[str, Any] = (await call(client, "save_memory", text=text, **fields))["memory"]
    return memory


async def texts(client: Client, tool: str, **arguments: Any) -> set[str]:
    """The texts a search or listing answers."""
    answer = await call(client, tool, limit=50, **arguments)
    return {memory["text"] for memory in answer["results" if tool == "search_memory" else "memories"]}


async def test_saves_land_in_their_folders_project_and_reads_stay_in_it(
    env: dict[str, str], folders: Folders
) -> None:
    async with host(env, folders.api) as api:
        pg = await save(api, "We use PostgreSQL 16 and pytest here", category="fact")
        name = await save(api, "The user is called Ada", category="profile")
        tabs = await save(api, "The user likes tabs, never spaces", category="preference")
        everywhere = await save(api, "The user works in Lisbon", category="fact", project="")
        context = await call(api, "get_context")
    assert pg["project"] == "github.com/acme/api"
    # Who the user is and what they like hold everywhere, unless a save says otherwise.
    assert [name["project"], tabs["project"], everywhere["project"]] == [None, None, None]
    assert context["project"] == "github.com/acme/api"
    assert {entry["project"]: entry["count"] for entry in context["projects"]} == {
        None: 3,
        "github.com/acme/api": 1,
    }

    async with host(env, folders.web) as web:
        mysql = await save(web, "We use MySQL 8 and unittest here", category="fact")
        assert mysql["project"] == "github.com/acme/web"
        # Repository B sees none of A's project memories and all of the memories with none.
        found = await texts(web, "search_memory", query="we use here user")
        assert found == {
            "We use MySQL 8 and unittest here",
            "The user is called Ada",
            "The user likes tabs, never spaces",
            "The user works in Lisbon",
        }
        assert "We use PostgreSQL 16 and pytest here" not in await texts(web, "list_memories")
        context = await call(web, "get_context", recent=50)
        shown = {m["text"] for section in ("profile", "preferences", "recent") for m in context[section]}
        assert "We use PostgreSQL 16 and pytest here" not in shown
        assert context["total"] == 4 and context["project"] == "github.com/acme/web"
        # "*" reads every project; a name reads that one and the memories with none.
        assert len(await texts(web, "search_memory", query="PostgreSQL MySQL", project="*")) == 2
        assert await texts(web, "search_memory", query="PostgreSQL", project="github.com/acme/api") == {
            "We use PostgreSQL 16 and pytest here"
        }
        assert await texts(web, "search_memory", query="PostgreSQL MySQL", project="") == set()
        # The same words saved here are a memory of this project, and A's is not even hinted at.
        echo = await call(web, "save_memory", text="We use PostgreSQL 16 and pytest here", category="fact")
        assert echo["memory"]["project"] == "github.com/acme/web" and echo["memory"]["id"] != pg["id"]
        assert echo.get("possibleDuplicates", []) == []
        hinted = await call(web, "save_memory", text="We use MySQL 8 and unittest here too", category="fact")
        assert [hint["id"] for hint in hinted["possibleDuplicates"]] == [mysql["id"]]

    # The worktree and its main checkout are one project.
    async with host(env, folders.worktree) as worktree:
        assert await texts(worktree, "search_memory", query="PostgreSQL") == {
            "We use PostgreSQL 16 and pytest here"
        }
        fix = await save(worktree, "The fix branch needs the migration first", category="task")
        assert fix["project"] == "github.com/acme/api"


async def test_a_repository_without_a_remote_a_folder_and_the_home_directory(
    env: dict[str, str], folders: Folders
) -> None:
    async with host(env, folders.local) as local:
        scratch = await save(local, "Scratch experiments run on port 8123", category="note")
    async with host(env, folders.plain) as plain:
        notes = await save(plain, "Notes are kept in markdown files", category="note")
    async with host(env, folders.home) as home:
        anywhere = await save(home, "The user prefers short answers", category="note")
        # Started in the home directory: only the memories with no project, by default.
        assert await texts(home, "list_memories") == {"The user prefers short answers"}
        assert len(await texts(home, "list_memories", project="*")) == 3
    assert scratch["project"] == str(folders.local.resolve())
    assert notes["project"] == str(folders.plain.resolve())
    assert anywhere["project"] is None


async def test_squirrel_project_wins_over_the_folder(env: dict[str, str], folders: Folders) -> None:
    async with host({**env, "SQUIRREL_PROJECT": "billing"}, folders.api) as named:
        saved = await save(named, "Invoices are sent on the first of the month", category="fact")
        assert (await call(named, "get_context"))["project"] == "billing"
    async with host({**env, "SQUIRREL_PROJECT": ""}, folders.api) as nowhere:
        assert (await save(nowhere, "Meetings are on Tuesdays", category="fact"))["project"] is None
        assert await texts(nowhere, "list_memories") == {"Meetings are on Tuesdays"}
    async with host(env, folders.api) as api:
        assert "Invoices are sent on the first of the month" not in await texts(api, "list_memories")
    assert saved["project"] == "billing"
    # A name no project can have is refused on every call, in one line without the value.
    async with host({**env, "SQUIRREL_PROJECT": "secret\nsecond line"}, folders.api) as refused:
        error = await call_error(refused, "list_memories")
    assert "SQUIRREL_PROJECT" in error and "single line" in error and "secret" not in error


async def test_moving_a_memory_shows_in_its_history_and_identical_saves_are_per_project(
    env: dict[str, str], folders: Folders
) -> None:
    async with host(env, folders.api) as api:
        first = await save(api, "Deploys go out on Fridays", category="fact")
        again = await call(api, "save_memory", text="Deploys go out on Fridays", category="fact")
        assert again["memory"]["id"] == first["id"] and "nothing was written" in again["note"]
        # The same memory in another project is another memory.
        other = await save(api, "Deploys go out on Fridays", category="fact", project="github.com/acme/web")
        assert other["id"] != first["id"] and other["project"] == "github.com/acme/web"
        moved = await call(api, "update_memory", id=first["id"], project="", reason="true everywhere")
        assert moved["memory"]["project"] is None
        history = (await call(api, "get_memory", id=first["id"], history=True))["history"]
        assert [revision["project"] for revision in history] == ["github.com/acme/api", None]
        same = await call(api, "update_memory", id=first["id"], project="")
        assert "nothing was written" in same["note"]
        assert "every project" in await call_error(api, "save_memory", text="x", project="*")


async def test_two_hosts_in_two_repositories_share_one_memory_process_and_stay_apart(
    env: dict[str, str], folders: Folders
) -> None:
    shared = shared_host_env(env)
    ready, done = anyio.Event(), anyio.Event()
    seen: dict[str, set[str]] = {}
    try:

        async def session(name: str, folder: Path, text: str) -> None:
            async with host(shared, folder) as client:
                await save(client, text, category="fact")
                if name == "api":
                    ready.set()
                    await done.wait()
                else:
                    await ready.wait()
                    # Both hosts connected to the one memory process.
                    assert len(memory_processes(shared)) == 1
                    seen["web"] = await texts(client, "search_memory", query="tests run with")
                    done.set()
                seen[name + " list"] = await texts(client, "list_memories")

        with anyio.fail_after(WITHIN):
            async with anyio.create_task_group() as hosts:
                hosts.start_soon(session, "api", folders.api, "Tests run with pytest in api")
                hosts.start_soon(session, "web", folders.web, "Tests run with unittest in web")
    finally:
        for pid in memory_processes(shared):
            os.kill(pid, signal.SIGKILL)
    assert seen["web"] == {"Tests run with unittest in web"}
    assert seen["web list"] == {"Tests run with unittest in web"}
    assert seen["api list"] == {"Tests run with pytest in api"}


async def test_the_vault_holds_no_project_in_clear(env: dict[str, str], folders: Folders) -> None:
    vault_file = Path(env["SQUIRREL_VAULT"])
    async with host(env, folders.api) as api:
        await save(api, "Builds use the release profile", category="fact")
    async with host(env, folders.plain) as plain:
        await save(plain, "Drafts live in the drafts folder", category="note")
    raw = b"".join(path.read_bytes() for path in vault_file.parent.iterdir() if path.is_file())
    with sqlite3.connect(vault_file) as db:
        rows = db.execute("SELECT * FROM records").fetchall()
    assert rows
    for secret in (b"acme", b"github.com", str(folders.plain.resolve()).encode()):
        assert secret not in raw
