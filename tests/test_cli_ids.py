"""`show` by the first digits of an id, and `list` and `show` cutting lines only on a terminal."""

from __future__ import annotations

import json
from pathlib import Path

from squirrel_mcp.core.models import Revision
from tests.conftest import run_cli
from tests.terminal import converse

LONG = "Grows basil, thyme, rosemary and sage " + "in clay pots on the sunny balcony " * 4
# Two ids that begin alike for 6 digits, and a third: a prefix can name one or both.
TWINS = ("abc123d000000001", "abc123e000000002")
SINGLE = "0f1e2d3c4b5a6978"


def _revision(memory_id: str, text: str) -> dict[str, object]:
    stamp = "2026-11-30T00:00:00.000Z"
    fields = {"id": memory_id, "entity": "user", "text": text, "tags": ["garden"], "keywords": []}
    times = {"createdAt": stamp, "updatedAt": stamp, "revision": 1, "change": "created"}
    return Revision.model_validate({**fields, "category": "note", **times}).model_dump(mode="json")


def _import(vault_env: dict[str, str], tmp_path: Path) -> None:
    """A vault holding three memories of known ids, brought in by the real `import`."""
    texts = {TWINS[0]: "Waters the tomatoes at dusk", TWINS[1]: "Keeps seeds in the shed", SINGLE: LONG}
    export = {
        "format": "squirrel-mcp-export",
        "version": 1,
        "exportedAt": "2026-11-30T00:00:00.000Z",
        "exportedBy": "tests",
        "memories": [{"id": key, "revisions": [_revision(key, text)]} for key, text in texts.items()],
    }
    path = tmp_path / "export.json"
    path.write_text(json.dumps(export))
    imported = run_cli(vault_env, "import", "--create", str(path))
    assert imported.returncode == 0, imported.stderr


def test_show_takes_the_first_digits_of_an_id_when_no_other_begins_with_them(
    vault_env: dict[str, str], tmp_path: Path
) -> None:
    _import(vault_env, tmp_path)
    whole = run_cli(vault_env, "show", SINGLE)
    assert whole.returncode == 0, whole.stderr
    for prefix in (SINGLE[:6], SINGLE[:10].upper()):
        shown = run_cli(vault_env, "show", prefix)
        assert (shown.returncode, shown.stdout) == (0, whole.stdout), shown.stderr
    # One digit more than the twins share names one of them.
    one_of_twins = json.loads(run_cli(vault_env, "show", TWINS[1][:7], "--json").stdout)
    assert one_of_twins["memory"]["id"] == TWINS[1]

    ambiguous = run_cli(vault_env, "show", "abc123")
    assert ambiguous.returncode == 1 and ambiguous.stdout == b""
    assert ambiguous.stderr.decode() == (
        f"squirrel-mcp: 'abc123' is the beginning of 2 memories' ids ({TWINS[0]}, {TWINS[1]}); "
        "give more of the id\n"
    )
    unknown = run_cli(vault_env, "show", "abc124")
    assert unknown.stderr.decode() == "squirrel-mcp: no memory has an id beginning with 'abc124'\n"
    # Too short, or not hex digits: what an id is, in words, and what was typed is not said back.
    for wrong in ("abc12", "my secret id", TWINS[0] + "0"):
        refused = run_cli(vault_env, "show", wrong)
        assert refused.returncode == 1
        message = refused.stderr.decode()
        assert message.startswith("squirrel-mcp: an id is 16 hex digits (0-9 and a-f)"), message
        assert wrong not in message and "[" not in message and "{" not in message


def test_lines_are_cut_on_a_terminal_and_whole_when_piped(vault_env: dict[str, str], tmp_path: Path) -> None:
    _import(vault_env, tmp_path)
    listed = run_cli(vault_env, "list").stdout.decode()
    assert "…" not in listed
    line = next(line for line in listed.splitlines() if line.startswith(SINGLE))
    assert line.endswith(f"user: {LONG.strip()}  [garden]")
    shown = run_cli(vault_env, "show", SINGLE).stdout.decode()
    assert "…" not in shown and f"    {LONG.strip()}\n" in shown
    assert shown.splitlines()[-1].endswith(f"no project · {LONG.strip()}")

    # On a terminal 60 columns wide, the long text's line is cut to it, with "…".
    terminal = {**vault_env, "COLUMNS": "60"}
    for command, whole_line in ((["list"], line), (["show", SINGLE], shown.splitlines()[-1])):
        code, output = converse(["-m", "squirrel_mcp", *command], terminal, lambda _: None)
        assert code == 0, output
        lines = output.replace("\r\n", "\n").splitlines()
        cut = next(printed for printed in lines if printed.startswith(whole_line[:30]))
        assert cut.endswith("…") and len(cut) < len(whole_line), command
        assert whole_line.startswith(cut.removesuffix("…")), command
