"""`squirrel-mcp hook` on what goes wrong: malformed input, no passphrase, no vault, a process too slow.

And `pre-compact`, which needs no vault. The real command, as the hosts run it (tests/test_hooks.py
has the helpers and the tests against a real memory process).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from squirrel_mcp.cli.hook import SUMMARY_REMINDER, USER_REMINDER
from squirrel_mcp.core.hello import Hello, HelloError, HookRequest
from tests import test_hooks
from tests.conftest import PASSPHRASE, run_cli, secrets_of_this_test
from tests.shared_support import channel_of, memory_processes
from tests.test_hooks import HOOK, NO_KEYCHAIN, Place, claude, codex, gemini, hook, no_private_text
from tests.test_projects_detect import needs_git

git_env, git, place = test_hooks.git_env, test_hooks.git, test_hooks.place

pytestmark = [pytest.mark.process, needs_git]


def test_pre_compact_reminds_without_the_vault(vault_env: dict[str, str], tmp_path: Path) -> None:
    # No vault, no passphrase, no memory process: the reminder needs none of them.
    hooked = {key: value for key, value in vault_env.items() if key != "SQUIRREL_PASSPHRASE"}
    hooked["XDG_RUNTIME_DIR"] = str(tmp_path)
    ran = hook(
        hooked,
        "pre-compact",
        "claude-code",
        claude("PreCompact", tmp_path, trigger="auto", custom_instructions=""),
    )
    # Claude Code takes a PreCompact hook's plain stdout as instructions to its summary.
    assert ran.out == SUMMARY_REMINDER and ran.err == []
    for host, given in (
        ("codex", codex("PreCompact", tmp_path, trigger="manual")),
        ("gemini", gemini("PreCompress", tmp_path, trigger="auto")),
    ):
        ran = hook(hooked, "pre-compact", host, given)
        assert json.loads(ran.out) == {"systemMessage": USER_REMINDER} and ran.err == []
    assert not Path(vault_env["SQUIRREL_VAULT"]).exists()


def test_malformed_input_prints_nothing_and_says_one_line(vault_env: dict[str, str], tmp_path: Path) -> None:
    hooked = {**vault_env, "XDG_RUNTIME_DIR": str(tmp_path), "PYTHON_KEYRING_BACKEND": NO_KEYCHAIN}
    secret_prompt = "my bank password is hunter2-hunter2"
    secrets_of_this_test().add(secret_prompt)
    inputs: list[tuple[str, bytes | dict[str, Any]]] = [
        ("prompt", b"not json at all " + secret_prompt.encode()),
        ("prompt", b"\xff\xfe\x00 binary"),
        ("prompt", json.dumps([secret_prompt]).encode()),
        ("prompt", {"cwd": str(tmp_path)}),
        ("prompt", {"cwd": str(tmp_path), "prompt": ["a", "list"]}),
        ("prompt", {"cwd": 42, "prompt": secret_prompt}),
        ("session-start", {"cwd": "relative/folder"}),
        ("session-start", b"[" * 100_000 + b"]" * 100_000),
        ("session-start", b"{" + b" " * (1 << 20) + b"}"),
        ("pre-compact", b""),
    ]
    for event, given in inputs:
        ran = hook(hooked, event, "claude-code", given)
        assert ran.out == "" and len(ran.err) == 1, (event, ran.err)
        assert secret_prompt not in ran.err[0]
    # Arguments a host's settings got wrong: still exit 0, one line.
    for arguments in (
        ["hook", "stop", "--host", "claude-code"],
        ["hook", "prompt", "--host", "cursor"],
        ["hook"],
    ):
        done = subprocess.run(
            [HOOK, *arguments],
            input=b"{}",
            env={"PATH": os.environ["PATH"], **hooked},
            capture_output=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0 and done.stdout == b"" and len(done.stderr.decode().splitlines()) == 1
    assert memory_processes(hooked) == []


def test_no_passphrase_no_keychain_and_no_process_prints_nothing(
    vault_env: dict[str, str], tmp_path: Path, place: Place
) -> None:
    hooked = {
        key: value
        for key, value in vault_env.items()
        if key not in ("SQUIRREL_PASSPHRASE", "SQUIRREL_PROJECT")
    }
    hooked.update(XDG_RUNTIME_DIR=str(tmp_path), PYTHON_KEYRING_BACKEND=NO_KEYCHAIN, HOME=str(place.home))
    prompt = "what port does the api staging database use"
    secrets_of_this_test().add(prompt)
    starts = (
        ("session-start", claude("SessionStart", place.api, source="startup")),
        ("prompt", claude("UserPromptSubmit", place.api, prompt=prompt)),
    )
    # No vault yet: a hook never makes one, even given the passphrase (a memory process's start would).
    for event, given in starts:
        ran = hook({**hooked, "SQUIRREL_PASSPHRASE": PASSPHRASE}, event, "claude-code", given)
        assert ran.out == "" and len(ran.err) == 1 and "no vault at" in ran.err[0]
    assert not Path(vault_env["SQUIRREL_VAULT"]).exists()
    assert run_cli(vault_env, "init").returncode == 0
    for event, given in starts:
        ran = hook(hooked, event, "claude-code", given)
        assert ran.out == "" and len(ran.err) == 1
        assert "passphrase" in ran.err[0] and "keychain" in ran.err[0]
        no_private_text(ran)
    assert memory_processes(hooked) == []


def test_a_memory_process_that_does_not_answer_in_time_leaves_the_prompt_alone(
    vault_env: dict[str, str], tmp_path: Path, place: Place
) -> None:
    hooked = {key: value for key, value in vault_env.items() if key != "SQUIRREL_PASSPHRASE"}
    hooked.update(
        XDG_RUNTIME_DIR=str(tmp_path),
        PYTHON_KEYRING_BACKEND=NO_KEYCHAIN,
        SQUIRREL_HOOK_DEADLINE="0.5",
        # Named, so that this test's process finds the channel the hook's finds.
        SQUIRREL_MEMORY_CACHE_DIR=vault_env["XDG_CACHE_HOME"],
    )
    assert run_cli({**hooked, "SQUIRREL_PASSPHRASE": PASSPHRASE}, "init").returncode == 0
    channel = channel_of(hooked)
    # A process listening on the vault's channel that takes the connection and never answers.
    listener = channel.listen()
    try:
        prompt = "api staging database PostgreSQL port"
        secrets_of_this_test().add(prompt)
        ran = hook(hooked, "prompt", "gemini", gemini("BeforeAgent", place.api, prompt=prompt))
        assert ran.out == "" and len(ran.err) == 1 and "0.5 s" in ran.err[0], ran.err
        no_private_text(ran)
    finally:
        listener.close()


def test_a_hook_request_that_is_not_one_is_no_hello() -> None:
    base = {"squirrel-mcp": 1, "identity": "[]", "settings": {}, "passphrase": None}
    request = HookRequest("prompt", 1500, "a question")
    good = Hello("[]", {}, None, project="github.com/acme/api", hook=request)
    assert Hello.read(good.line()) == good
    assert "a question" not in repr(good) and "acme" not in repr(good)
    bad = [
        "prompt",
        {"event": "stop", "budget": 10},
        {"event": "prompt", "budget": 10},
        {"event": "session-start", "budget": 10, "prompt": "a question"},
        {"event": "prompt", "budget": 0, "prompt": "a question"},
        {"event": "prompt", "budget": True, "prompt": "a question"},
        {"event": "prompt", "budget": 10**7, "prompt": "a question"},
        {"event": "prompt", "budget": 10, "prompt": "x" * 1001},
        {"event": "prompt", "budget": 10, "prompt": "\ud800"},
    ]
    for hook_field in bad:
        with pytest.raises(HelloError):
            Hello.read(json.dumps({**base, "hook": hook_field}).encode())
    with pytest.raises(HelloError):
        Hello.read(json.dumps({**base, "hook": {"event": "session-start", "budget": 9}, "page": {}}).encode())
