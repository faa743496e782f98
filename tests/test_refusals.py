"""Every refusal of a tool's arguments, through the real server: one sentence for a person.

A matrix of bad inputs, made from each tool's own input schema (every field: null, the
wrong kind, past its bounds, not one of its values; every required field left out), is
sent to every tool of one server; each answer must name the field in one sentence, say
what to send, and hold none of the validation library's wording.
"""

from __future__ import annotations

import re
import sqlite3
from typing import Any

import pytest
from mcp import Client

from tests.conftest import call, call_error

pytestmark = pytest.mark.anyio

# What a valid call sends for each required input, so that only the field under test is wrong.
VALID = {"id": "0123456789abcdef", "text": "Keeps bees on the roof", "query": "bees"}
# The validation library's and the SDK's own wording, which a person should never be shown.
LIBRARY_WORDS = re.compile(
    r"Input should|literal\[|after validation|Field required|String should|List should|Value error"
    r"|validation error|pydantic|errors\.pydantic|type=|constrained-|Error executing tool|\bnone\b:",
)
# A refusal is one sentence: no full stop before its end, and no second line.
ONE_SENTENCE = re.compile(r"invalid arguments for [a-z_]+: [^\n]*[^.\n][.?]")


def bad_values(schema: dict[str, Any]) -> list[tuple[str, Any]]:
    """Values the input with this JSON schema refuses, each with what it breaks."""
    kind = schema.get("type")
    values: list[tuple[str, Any]] = [("null", None)]
    values.append(("wrong kind", {"an": "object"} if kind != "array" else "a string"))
    if "enum" in schema:
        values.append(("not one of its values", "gossip"))
    if kind == "integer":
        values += [("a fraction", 2.5), ("below its minimum", schema["minimum"] - 1)]
        if "maximum" in schema:
            values.append(("above its maximum", schema["maximum"] + 1))
    if kind == "string" and "maxLength" in schema:
        values.append(("too long", "x" * (schema["maxLength"] + 1)))
    if kind == "string" and schema.get("minLength"):
        values.append(("empty", ""))
    if kind == "string" and "pattern" in schema:
        values.append(("not of its form", "../etc/passwd"))
    if kind == "array":
        values += [
            ("too many items", [f"t{n}" for n in range(schema["maxItems"] + 1)]),
            ("an item too long", ["ok", "y" * (schema["items"]["maxLength"] + 1)]),
            ("an item of the wrong kind", ["ok", 7]),
            ("an item on two lines", ["two\nlines"]),
        ]
    return values


def record_count(env: dict[str, str]) -> int:
    with sqlite3.connect(f"file:{env['SQUIRREL_VAULT']}?mode=ro", uri=True) as db:
        count: int = db.execute("SELECT count(*) FROM records").fetchone()[0]
    return count


async def test_every_refusal_of_every_tool_is_one_sentence_naming_the_field(
    client: Client, vault_env: dict[str, str]
) -> None:
    await call(client, "save_memory", text="Prefers tea over coffee", category="preference")
    before = record_count(vault_env)
    tools = (await client.list_tools()).tools
    sent = 0
    for tool in tools:
        properties: dict[str, Any] = tool.input_schema.get("properties", {})
        required: list[str] = tool.input_schema.get("required", [])
        valid = {name: VALID[name] for name in required}
        cases = [
            (field, what, {**valid, field: value})
            for field in properties
            for what, value in bad_values(properties[field])
        ]
        cases += [(field, "left out", {k: v for k, v in valid.items() if k != field}) for field in required]
        for field, what, arguments in cases:
            error = await call_error(client, tool.name, **arguments)
            sent += 1
            case = f"{tool.name}.{field} {what}: {error}"
            assert ONE_SENTENCE.fullmatch(error), case
            assert f"`{field}`" in error and ": send " in error, case
            assert LIBRARY_WORDS.search(error) is None, case
            # Said once: a union's members (the value, and null) are not each a problem.
            assert error.count(f"`{field}`") == 1, case
    assert sent > 120
    # Nothing refused was written, and the server still serves.
    assert record_count(vault_env) == before
    assert (await call(client, "get_context"))["total"] == 1


async def test_null_is_refused_where_leaving_the_input_out_is_taken(client: Client) -> None:
    """The README's "no null": a null filter is refused, never read as "no filter"."""
    await call(client, "save_memory", text="Keeps bees on the roof", category="fact")
    assert (await call(client, "search_memory", query="bees"))["total"] == 1
    error = await call_error(client, "search_memory", query="bees", category=None)
    assert error == (
        "invalid arguments for search_memory: `category` is null, which no input takes: send one of "
        "profile, preference, fact, project, note, event or task, or leave it out."
    )


async def test_a_project_the_tool_refuses_is_said_as_the_schemas_refusals_are(client: Client) -> None:
    error = await call_error(client, "save_memory", text="Keeps bees", project="two\nlines")
    assert error == (
        "invalid arguments for save_memory: `project` must be a single line: send a project's name "
        '(one line of at most 1,000 characters), or "" for none, or leave it out.'
    )
    listed = await call_error(client, "list_memories", project="two\nlines")
    assert listed.startswith("invalid arguments for list_memories: `project` must be a single line")
    assert '"*" for every project' in listed
