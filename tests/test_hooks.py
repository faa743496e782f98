"""`squirrel-mcp hook`, the real command, as Claude Code, Codex and Gemini CLI run it.

Each test writes a host's documented JSON on the hook's stdin (the fields each host sends: the
session's id, the transcript's path, `cwd`, the event's name, and the start's `source` or the
prompt), in real git repositories as the session's folder, against a real vault whose memory
process a host's server (or the test's first hook) started; the test kills that process by
its pid at the end. The hooks run without SQUIRREL_PASSPHRASE and with no usable keychain,
as in a host's environment: the running memory process answers them as the same user.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from squirrel_mcp.core.config import Config
from squirrel_mcp.core.hello import Hello, HookRequest, identity, settings
from squirrel_mcp.server.hooks import RECALL_HEADER
from tests import test_projects_detect as detect
from tests.conftest import call, run_cli, secrets_of_this_test, server_params
from tests.exports import export_of
from tests.shared_support import channel_of, memory_process, memory_processes, wait_until
from tests.test_projects_detect import Git, make_repo, needs_git

git_env, git = detect.git_env, detect.git

pytestmark = [pytest.mark.anyio, pytest.mark.process, needs_git]

HOOK = str(Path(sys.executable).parent / "squirrel-mcp")
NO_KEYCHAIN = "keyring.backends.fail.Keyring"


class Place:
    """A test's folders: two repositories (two projects) and a plain folder's home."""

    def __init__(self, git: Git, root: Path) -> None:
        self.home = root / "home"
        self.home.mkdir()
        self.api = make_repo(git, root / "code" / "api", "git@github.com:acme/api.git")
        self.web = make_repo(git, root / "code" / "web", "https://github.com/acme/web.git")


@pytest.fixture
def place(git: Git, tmp_path: Path) -> Place:
    return Place(git, tmp_path)


@pytest.fixture
def env(vault_env: dict[str, str], place: Place) -> Iterator[dict[str, str]]:
    """The host's environment: the vault shared through a channel of this test's, placed by folder.

    The memory process stays once its hosts have gone (an idle time), as by default, so that
    the hooks find it; the test kills it by its pid at the end.
    """
    chosen = {key: value for key, value in vault_env.items() if key != "SQUIRREL_PROJECT"}
    runtime = tempfile.mkdtemp(prefix="sq-hk-")
    chosen.update(
        HOME=str(place.home),
        XDG_RUNTIME_DIR=runtime,
        SQUIRREL_MCP_SHARED="1",
        SQUIRREL_MCP_SHARED_IDLE="600",
        SQUIRREL_MEMORY_CACHE_DIR=vault_env["XDG_CACHE_HOME"],
    )
    secrets_of_this_test().stderr_files.append(channel_of(chosen).log_path)
    yield chosen
    for pid in memory_processes(chosen):
        os.kill(pid, signal.SIGKILL)


def hook_env(env: dict[str, str], **settings: str) -> dict[str, str]:
    """A host's environment for its hooks: no passphrase, no keychain; a deadline a loaded machine meets."""
    hooked = {key: value for key, value in env.items() if key != "SQUIRREL_PASSPHRASE"}
    hooked.update(PYTHON_KEYRING_BACKEND=NO_KEYCHAIN, SQUIRREL_HOOK_DEADLINE="60", **settings)
    return hooked


class Ran:
    """One hook's run: its exit status, stdout and stderr lines."""

    def __init__(self, done: subprocess.CompletedProcess[bytes]) -> None:
        self.status = done.returncode
        self.out = done.stdout.decode("utf-8")
        self.err = done.stderr.decode("utf-8").splitlines()

    def context(self, event_name: str) -> str:
        """The additionalContext of a hookSpecificOutput answer for `event_name`."""
        answer = json.loads(self.out)
        assert set(answer) == {"hookSpecificOutput"}, answer
        output = answer["hookSpecificOutput"]
        assert output["hookEventName"] == event_name
        text = output["additionalContext"]
        assert isinstance(text, str) and text
        return text


def hook(
    env: dict[str, str], event: str, host: str, given: dict[str, Any] | bytes, *, cwd: Path | None = None
) -> Ran:
    """`squirrel-mcp hook EVENT --host HOST` with `given` on its stdin, as the host runs it."""
    data = given if isinstance(given, bytes) else json.dumps(given).encode("utf-8")
    done = subprocess.run(
        [HOOK, "hook", event, "--host", host],
        input=data,
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        timeout=120,
        check=False,
        cwd=cwd,
    )
    ran = Ran(done)
    secrets_of_this_test().texts.append((f"stderr of squirrel-mcp hook {event}", "\n".join(ran.err)))
    assert ran.status == 0
    return ran


def claude(event: str, cwd: Path, **fields: str) -> dict[str, Any]:
    """Claude Code's input: every event has these fields, and its own (`source`, `prompt`, `trigger`)."""
    return {
        "session_id": "0b6c5c8e-claude",
        "transcript_path": str(cwd / "transcript.jsonl"),
        "cwd": str(cwd),
        "permission_mode": "default",
        "hook_event_name": event,
        **fields,
    }


def codex(event: str, cwd: Path, **fields: str) -> dict[str, Any]:
    """Codex's input: Claude Code's shape, with the model (and a turn's id at a prompt)."""
    extra = {"turn_id": "turn-1"} if event == "UserPromptSubmit" else {}
    return {
        "session_id": "codex-session",
        "transcript_path": None,
        "cwd": str(cwd),
        "hook_event_name": event,
        "model": "gpt-5-codex",
        **extra,
        **fields,
    }


def gemini(event: str, cwd: Path, **fields: str) -> dict[str, Any]:
    """Gemini CLI's input: its base fields (with a timestamp), and the event's own."""
    return {
        "session_id": "gemini-session",
        "transcript_path": str(cwd / "chat.json"),
        "cwd": str(cwd),
        "hook_event_name": event,
        "timestamp": "2026-12-06T16:00:00.000Z",
        **fields,
    }


API_FACT = "The api service deploys with blue green releases behind the Envoy gateway"
WEB_FACT = "The web frontend deploys with blue green releases behind the Caddy gateway"
EVERYWHERE = "The user prefers answers in British English with metric units"
DATABASE = "The api staging database runs PostgreSQL sixteen on port 5433"
OTHER_DATABASE = "The web staging database runs PostgreSQL sixteen on port 6543"


# Made-up words no prompt holds: the vault's other memories, so that its words' statistics are a
# vault's (the calibrated confidence of words alone is measured on vaults of hundreds of memories).
FILLER_COUNT = 300


def filler_export() -> dict[str, Any]:
    """An export of FILLER_COUNT memories with no project, each of six made-up words."""
    rng = random.Random(45)
    memories = []
    for number in range(FILLER_COUNT):
        text = " ".join(
            "".join(rng.choices("bdfgklmnprstvz", k=3)) + rng.choice(["ix", "oq", "uy"]) for _ in range(6)
        )
        memory_id = f"{number + 1:016x}"
        stamp = f"2026-11-{1 + number % 28:02d}T08:00:00.000Z"
        revision = {"id": memory_id, "entity": "notes", "text": text, "tags": [], "keywords": []}
        revision |= {
            "category": "note",
            "createdAt": stamp,
            "updatedAt": stamp,
            "revision": 1,
            "change": "created",
        }
        memories.append({"id": memory_id, "revisions": [revision]})
    return export_of(memories)


async def save_all(env: dict[str, str], place: Place) -> dict[str, str]:
    """Memories in two projects and one in none, saved by hosts in the repositories, among
    FILLER_COUNT others with none: text -> id."""
    secrets_of_this_test().add([API_FACT, WEB_FACT, EVERYWHERE, DATABASE, OTHER_DATABASE])
    file = Path(env["HOME"]).parent / "filler.json"
    file.write_text(json.dumps(filler_export()), encoding="utf-8")
    imported = run_cli(env, "import", "--create", str(file))
    assert imported.returncode == 0, imported.stderr
    ids = {}
    async with Client(server_params(env).model_copy(update={"cwd": str(place.api)})) as api:
        for text, category in ((API_FACT, "project"), (DATABASE, "fact")):
            saved = await call(api, "save_memory", text=text, entity="infrastructure", category=category)
            ids[text] = saved["memory"]["id"]
        saved = await call(
            api, "save_memory", text=EVERYWHERE, entity="user", category="preference", project=""
        )
        ids[EVERYWHERE] = saved["memory"]["id"]
    async with Client(server_params(env).model_copy(update={"cwd": str(place.web)})) as web:
        for text, category in ((WEB_FACT, "project"), (OTHER_DATABASE, "fact")):
            saved = await call(web, "save_memory", text=text, entity="infrastructure", category=category)
            ids[text] = saved["memory"]["id"]
    assert memory_process(env) is not None
    return ids


def no_private_text(ran: Ran) -> None:
    """A hook's stderr holds no memory, no prompt and no project."""
    said = "\n".join(ran.err)
    for private in ("acme", "PostgreSQL", "Envoy", "British", "staging"):
        assert private not in said, said


async def test_session_start_briefs_each_host_with_its_projects_memories(
    env: dict[str, str], place: Place
) -> None:
    ids = await save_all(env, place)
    hooked = hook_env(env)
    starts = [
        *(
            ("claude-code", claude("SessionStart", place.api, source=source))
            for source in ("startup", "resume", "clear", "compact")
        ),
        ("codex", codex("SessionStart", place.api, source="startup")),
        ("gemini", gemini("SessionStart", place.api, source="startup")),
    ]
    for host, given in starts:
        ran = hook(hooked, "session-start", host, given)
        text = ran.context("SessionStart")
        assert ran.err == []
        for mine in (API_FACT, DATABASE, EVERYWHERE):
            assert f"[{ids[mine]}]" in text and mine in text
        for theirs in (WEB_FACT, OTHER_DATABASE):
            assert theirs not in text and ids[theirs] not in text
        assert len(text) <= 4000
    # The other repository's session sees its own, and the memories with no project.
    text = hook(
        hooked, "session-start", "claude-code", claude("SessionStart", place.web, source="startup")
    ).context("SessionStart")
    assert WEB_FACT in text and EVERYWHERE in text and API_FACT not in text and DATABASE not in text
    # The hook's own folder does not matter: the host's `cwd` says the session's.
    elsewhere = hook(
        hooked, "session-start", "gemini", gemini("SessionStart", place.web, source="resume"), cwd=place.api
    )
    assert API_FACT not in elsewhere.context("SessionStart")


async def test_prompt_recalls_the_confident_memories_of_the_sessions_project(
    env: dict[str, str], place: Place
) -> None:
    ids = await save_all(env, place)
    hooked = hook_env(env)
    # Every word of the prompt is in the memory: confident whatever the calibrated thresholds.
    prompt = "api staging database PostgreSQL port"
    secrets_of_this_test().add(prompt)
    asked = [
        ("claude-code", claude("UserPromptSubmit", place.api, prompt=prompt), "UserPromptSubmit"),
        ("codex", codex("UserPromptSubmit", place.api, prompt=prompt), "UserPromptSubmit"),
        ("gemini", gemini("BeforeAgent", place.api, prompt=prompt), "BeforeAgent"),
    ]
    for host, given, name in asked:
        ran = hook(hooked, "prompt", host, given)
        text = ran.context(name)
        assert ran.err == []
        assert f"[{ids[DATABASE]}]" in text and DATABASE in text
        assert OTHER_DATABASE not in text and ids[OTHER_DATABASE] not in text
        memories = [line for line in text.splitlines() if line.startswith("- [")]
        assert 1 <= len(memories) <= 5
        assert len(text) <= 1500


async def test_a_prompt_nothing_answers_prints_nothing(env: dict[str, str], place: Place) -> None:
    await save_all(env, place)
    hooked = hook_env(env)
    prompts = [
        "hello there!",
        "Refactor this function to use a list comprehension",
        "thanks, that worked",
        "  ",
    ]
    secrets_of_this_test().add(prompts)
    for prompt in prompts:
        for host, given in (
            ("claude-code", claude("UserPromptSubmit", place.api, prompt=prompt)),
            ("gemini", gemini("BeforeAgent", place.api, prompt=prompt)),
        ):
            ran = hook(hooked, "prompt", host, given)
            assert (ran.out, ran.err) == ("", [])


async def test_the_budgets_bound_the_text_and_say_what_was_left_out(
    env: dict[str, str], place: Place
) -> None:
    ids = await save_all(env, place)
    hooked = hook_env(env, SQUIRREL_HOOK_CONTEXT_BUDGET="400", SQUIRREL_HOOK_RECALL_BUDGET="200")
    text = hook(hooked, "session-start", "codex", codex("SessionStart", place.api, source="startup")).context(
        "SessionStart"
    )
    assert len(text) <= 400
    shown = [line for line in text.splitlines() if line.startswith("- [")]
    assert 1 <= len(shown) < 3
    assert text.splitlines()[-1].startswith(f"Shown {len(shown)} of {FILLER_COUNT + 3} memories")
    assert "list_memories" in text.splitlines()[-1]
    # A recall budget that holds the header but not one memory's line: nothing fits, nothing is said.
    prompt = "api staging database PostgreSQL port"
    secrets_of_this_test().add(prompt)
    tight = hook_env(env, SQUIRREL_HOOK_RECALL_BUDGET=str(len(RECALL_HEADER) + 20))
    ran = hook(tight, "prompt", "claude-code", claude("UserPromptSubmit", place.api, prompt=prompt))
    assert (ran.out, ran.err) == ("", [])
    fits = len(RECALL_HEADER) + len(f"\n- [{ids[DATABASE]}] (infrastructure) {DATABASE}")
    ran = hook(
        hook_env(env, SQUIRREL_HOOK_RECALL_BUDGET=str(fits)),
        "prompt",
        "gemini",
        gemini("BeforeAgent", place.api, prompt=prompt),
    )
    assert len(ran.context("BeforeAgent")) == fits
    roomy = hook(
        hook_env(env, SQUIRREL_HOOK_RECALL_BUDGET="100000"),
        "prompt",
        "codex",
        codex("UserPromptSubmit", place.api, prompt=prompt),
    )
    assert ids[DATABASE] in roomy.context("UserPromptSubmit")


async def test_the_first_hook_starts_the_memory_process_and_the_next_find_it(
    env: dict[str, str], place: Place
) -> None:
    ids = await save_all(env, place)
    for pid in memory_processes(env):
        os.kill(pid, signal.SIGKILL)
    wait_until(lambda: memory_process(env) is None, "the memory process ended")
    # With the passphrase (as the keychain would give it), a session's start starts the process.
    started = hook(
        hook_env(env, SQUIRREL_PASSPHRASE=env["SQUIRREL_PASSPHRASE"]),
        "session-start",
        "claude-code",
        claude("SessionStart", place.api, source="startup"),
    )
    assert API_FACT in started.context("SessionStart") and started.err == []
    pid = memory_process(env)
    assert pid is not None
    # The prompts after it, without one, are answered by that process.
    prompt = "api staging database PostgreSQL port"
    secrets_of_this_test().add(prompt)
    ran = hook(hook_env(env), "prompt", "codex", codex("UserPromptSubmit", place.api, prompt=prompt))
    assert ids[DATABASE] in ran.context("UserPromptSubmit")
    assert memory_processes(env) == [pid]


async def test_a_hook_hello_gets_its_one_answer_and_never_an_mcp_session(
    env: dict[str, str], place: Place
) -> None:
    ids = await save_all(env, place)
    channel = channel_of(env)
    config = Config.from_env(env)
    request = HookRequest("session-start", 4000)
    # Another setting than the memory process's (a host's environment is not its server's config).
    hello = Hello(identity(config), settings(config, {"SQUIRREL_MCP_TRACE_HOOKS": "1"}), None, hook=request)
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    connection = channel.connect()
    assert connection is not None
    with connection, connection.makefile("rb") as reader:
        connection.sendall(hello.line() + json.dumps(initialize).encode() + b"\n")
        assert json.loads(reader.readline()) == {"ok": True}
        # No project in the hello: the memories with none only.
        text = json.loads(reader.readline())["text"]
        assert ids[EVERYWHERE] in text and ids[API_FACT] not in text
        # Then the connection ends: the MCP line after the hello is never answered.
        assert reader.read() == b""
