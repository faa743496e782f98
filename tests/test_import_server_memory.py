"""`squirrel-mcp import --from server-memory`: the official memory server's own file, imported.

The real `@modelcontextprotocol/server-memory` (from npm, pinned, installed once into
build/) is run over stdio, fed entities, observations and relations through its
tools, and the JSONL file it wrote is imported, twice.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.conftest import run_cli, secrets_of_this_test, server_params

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "@modelcontextprotocol/server-memory"
VERSION = "2026.8.31"
PINNED = f"{PACKAGE}@{VERSION}"
CACHE = ROOT / "build" / "npm" / f"server-memory-{VERSION}"
SCRIPT = CACHE / "node_modules" / "@modelcontextprotocol" / "server-memory" / "dist" / "index.js"


@pytest.fixture(scope="module")
def memory_server() -> Path:
    """The memory server's script, installed from npm into build/ on first use."""
    if shutil.which("npm") is None or shutil.which("node") is None:
        pytest.skip("Node.js and npm are needed to run the official memory server")
    if not SCRIPT.is_file():
        CACHE.parent.mkdir(parents=True, exist_ok=True)
        # Installed beside, then renamed: a run cut short never leaves a half-installed cache.
        staging = Path(tempfile.mkdtemp(dir=CACHE.parent, prefix=".installing-"))
        subprocess.run(
            ["npm", "install", "--silent", "--no-audit", "--no-fund", "--prefix", str(staging), PINNED],
            check=True,
            capture_output=True,
            timeout=600,
        )
        try:
            staging.rename(CACHE)
        except OSError:
            # Another run installed it meanwhile.
            shutil.rmtree(staging, ignore_errors=True)
    assert SCRIPT.is_file()
    return SCRIPT


# What an agent would tell the memory server (names, types and observations of a user).
ENTITIES = [
    {"name": "default_user", "entityType": "person", "observations": ["Prefers tea over coffee"]},
    {"name": "Anna", "entityType": "person", "observations": ["Lives in Lyon", "Plays the cello"]},
    {"name": "Acme Corp", "entityType": "organization", "observations": []},
]
MORE_OBSERVATIONS = [{"entityName": "default_user", "contents": ["Allergic to peanuts", "Runs on Sundays"]}]
RELATIONS = [
    {"from": "default_user", "to": "Anna", "relationType": "is_sibling_of"},
    {"from": "Anna", "to": "Acme Corp", "relationType": "works_at"},
]


async def _fill_memory_server(script: Path, memory_file: Path) -> None:
    params = StdioServerParameters(
        command="node",
        args=[str(script)],
        env={"PATH": os.environ["PATH"], "MEMORY_FILE_PATH": str(memory_file)},
    )
    async with Client(params) as client:
        for tool, arguments in (
            ("create_entities", {"entities": ENTITIES}),
            ("add_observations", {"observations": MORE_OBSERVATIONS}),
            ("create_relations", {"relations": RELATIONS}),
        ):
            result = await client.call_tool(tool, arguments)
            assert not result.is_error, result.content


def _listed(env: dict[str, str]) -> list[dict[str, Any]]:
    result = run_cli(env, "list", "--limit", "100", "--json")
    assert result.returncode == 0, result.stderr
    memories: list[dict[str, Any]] = json.loads(result.stdout)["memories"]
    return memories


@pytest.mark.anyio
async def test_the_memory_servers_file_imports_once(
    memory_server: Path, vault_env: dict[str, str], tmp_path: Path
) -> None:
    memory_file = tmp_path / "memory.jsonl"
    await _fill_memory_server(memory_server, memory_file)
    lines = [json.loads(line) for line in memory_file.read_text().splitlines() if line.strip()]
    assert sorted(line["type"] for line in lines) == ["entity"] * 3 + ["relation"] * 2

    first = run_cli(vault_env, "import", "--create", "--from", "server-memory", str(memory_file))
    assert first.returncode == 0, first.stderr
    # 5 observations, 1 entity without any, 2 relations.
    assert first.stdout.decode().strip() == (
        "imported 3 entities and 2 relations from server-memory: 8 memories added, 0 already present"
    )
    memories = {(m["entity"], m["text"]): m for m in _listed(vault_env)}
    assert set(memories) == {
        ("default_user", "Prefers tea over coffee"),
        ("default_user", "Allergic to peanuts"),
        ("default_user", "Runs on Sundays"),
        ("Anna", "Lives in Lyon"),
        ("Anna", "Plays the cello"),
        ("Acme Corp", "Acme Corp (organization)"),
        ("default_user", "default_user is sibling of Anna"),
        ("Anna", "Anna works at Acme Corp"),
    }
    assert memories[("Anna", "Lives in Lyon")]["tags"] == ["person", "server-memory"]
    assert memories[("Anna", "Anna works at Acme Corp")]["tags"] == ["relation", "server-memory"]
    assert {m["category"] for m in memories.values()} == {"fact"}

    # Twice: nothing added; also a memory deleted since is not brought back.
    peanuts = memories[("default_user", "Allergic to peanuts")]["id"]
    async with Client(server_params(vault_env)) as client:
        result = await client.call_tool("delete_memory", {"id": peanuts})
        assert not result.is_error
    second = run_cli(vault_env, "import", "--from", "server-memory", str(memory_file))
    assert second.returncode == 0, second.stderr
    assert b": 0 memories added, 8 already present" in second.stdout
    assert len(_listed(vault_env)) == 7

    # The imported memories are found as any other.
    found = run_cli(vault_env, "search", "cello", "--json")
    assert [hit["text"] for hit in json.loads(found.stdout)["results"]] == ["Plays the cello"]


def test_faulty_lines_are_named_by_number_and_nothing_is_written(
    vault_env: dict[str, str], tmp_path: Path
) -> None:
    secret = "my secret diagnosis"
    secrets_of_this_test().add(secret)
    good = {"type": "entity", "name": "Anna", "entityType": "person", "observations": ["Lives in Lyon"]}
    lines = [
        json.dumps(good),
        "",
        "{" + secret,
        json.dumps({"type": "entity", "name": "x\n" + secret, "entityType": "person", "observations": []}),
        json.dumps({"type": secret}),
        json.dumps({"type": "relation", "from": "Anna", "to": secret}),
        json.dumps({**good, "observations": [secret * 300]}),
        json.dumps([secret]),
    ]
    path = tmp_path / "memory.jsonl"
    path.write_text("\n".join(lines))
    assert run_cli(vault_env, "init").returncode == 0
    result = run_cli(vault_env, "import", "--from", "server-memory", str(path))
    assert result.returncode == 1
    said = result.stderr.decode()
    assert len(said.strip().splitlines()) == 1
    assert "nothing was imported" in said
    for expected in (
        "line 3: not JSON",
        "line 4: entity: name (Value error, must be a single line)",
        'line 5: neither an entity nor a relation ("type" must be "entity" or "relation")',
        "line 6: relation: relationType (Field required)",
        "line 7: entity: observations.0 (String should have at most 4000 characters)",
        "line 8: not a JSON object",
    ):
        assert expected in said, said
    assert "line 1" not in said
    assert secret not in said
    assert _listed(vault_env) == []


def test_skip_invalid_imports_the_rest_and_names_the_skipped_lines(
    vault_env: dict[str, str], tmp_path: Path
) -> None:
    secret = "my secret diagnosis"
    secrets_of_this_test().add(secret)
    anna = {"type": "entity", "name": "Anna", "entityType": "person", "observations": ["Lives in Lyon"]}
    lines = [
        json.dumps(anna),
        json.dumps({**anna, "name": "Ben", "observations": ["x" * 4001]}),
        "{" + secret,
        json.dumps({"type": "relation", "from": "Anna", "to": "Ben", "relationType": "knows"}),
    ]
    path = tmp_path / "memory.jsonl"
    path.write_text("\n".join(lines))
    assert run_cli(vault_env, "init").returncode == 0
    # All or nothing by default: the one observation too long refuses the whole file.
    refused = run_cli(vault_env, "import", "--from", "server-memory", str(path))
    assert refused.returncode == 1 and "--skip-invalid imports the valid lines" in refused.stderr.decode()
    assert _listed(vault_env) == []

    result = run_cli(vault_env, "import", "--from", "server-memory", "--skip-invalid", str(path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().strip() == (
        "imported 1 entities and 1 relations from server-memory: 2 memories added, 0 already present; "
        "2 invalid lines skipped"
    )
    assert result.stderr.decode().splitlines() == [
        "squirrel-mcp: skipped line 2: entity: observations.0 (String should have at most 4000 characters)",
        "squirrel-mcp: skipped line 3: not JSON",
    ]
    assert sorted(memory["text"] for memory in _listed(vault_env)) == ["Anna knows Ben", "Lives in Lyon"]

    # Only that format has lines to skip.
    native = run_cli(vault_env, "import", "--skip-invalid", str(path))
    assert native.returncode == 1 and b"--skip-invalid applies to --from server-memory only" in native.stderr
