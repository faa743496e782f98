"""A tool's refused arguments, said in one sentence for a person: the field, the rule, what to send.

The validation library's messages ("Input should be None", "literal['profile',...]", a
regular expression) are written for programmers, and a union's every member adds one. Here
each field's problem is said once, in words, with what to send instead, taken from the
tool's input schema: the schema the agent read is what the refusal repeats. The rejected
values are never repeated: they may be memory text.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from typing import Any

from mcp.server.mcpserver.exceptions import ToolError
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from squirrel_mcp.core.models import MEMORY_ID_PATTERN

# How many problems a refusal lists.
MAX_PROBLEMS = 8
# An unknown argument's name is repeated in the error only when it looks like one: a key made of
# anything else (a sentence, a memory's text sent in the wrong place) is not echoed.
ARGUMENT_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,39}")
# The schema's JSON types, as a person says them.
KINDS = {"string": "text", "integer": "a whole number", "boolean": "true or false", "array": "a list"}
# Errors saying a value is of the wrong kind (a number where text goes, "yes" for a boolean).
WRONG_KIND = re.compile(r".*_(type|parsing)$|int_from_float|bool_type")


class ArgumentRefused(ToolError):
    """A tool's argument refused by the tool itself, past the schema.

    Its message is the clause naming the field, the rule and what to send, which the
    server says as `describe_invalid` says the schema's refusals.
    """


def _unknown(name: str, known: Sequence[str]) -> str:
    """An argument the tool does not take, with the one it probably meant (case and _ or - aside)."""
    if ARGUMENT_NAME.fullmatch(name) is None:
        return "an argument this tool does not take (its name is not repeated: it is no argument name)"

    def plain(word: str) -> str:
        return word.casefold().replace("_", "").replace("-", "")

    plains = {plain(argument): argument for argument in known}
    close = difflib.get_close_matches(plain(name), plains, n=1, cutoff=0.6)
    return f"unknown argument `{name}`" + (f"; did you mean `{plains[close[0]]}`?" if close else "")


def _count(number: object) -> str:
    return f"{number:,}" if isinstance(number, int) else str(number)


def _text(schema: Mapping[str, Any]) -> str:
    """What a string field takes, from its bounds."""
    if schema.get("pattern") == MEMORY_ID_PATTERN:
        return "a memory's id, the 16 characters (0-9 and a-f) save_memory and search_memory answer"
    low, high = schema.get("minLength"), schema.get("maxLength")
    if low and high:
        return f"text of {_count(low)} to {_count(high)} characters"
    if high:
        return f"text of at most {_count(high)} characters"
    return "text"


def wanted(schema: Mapping[str, Any]) -> str:
    """What an input with this JSON schema takes, in words: "a whole number from 1 to 50"."""
    if "enum" in schema:
        values = [str(value) for value in schema["enum"]]
        return "one of " + ", ".join(values[:-1]) + f" or {values[-1]}" if len(values) > 1 else values[0]
    kind = schema.get("type")
    if kind == "string":
        return _text(schema)
    if kind == "integer":
        low, high = schema.get("minimum"), schema.get("maximum")
        if low is not None and high is not None:
            return f"a whole number from {_count(low)} to {_count(high)}"
        return f"a whole number of at least {_count(low)}" if low is not None else "a whole number"
    if kind == "array":
        items = _text(schema.get("items", {}))
        most = schema.get("maxItems")
        return f"a list of at most {_count(most)} items, each {items}" if most else f"a list, each {items}"
    return KINDS.get(str(kind), "a value its description names")


def _rule(error: ErrorDetails, schema: Mapping[str, Any], item: bool) -> str:
    """What is wrong with the field (or its item), without its value."""
    kind, context = error["type"], error.get("ctx") or {}
    if kind == "missing":
        return "is required"
    if kind == "null":
        return "is null, which no input takes"
    if kind in ("literal_error", "enum"):
        return "is not one of the values it takes"
    if kind == "string_too_short":
        return "is empty (spaces aside)"
    if kind == "string_too_long":
        return f"is longer than {_count(context.get('max_length'))} characters"
    if kind == "too_long":
        return f"has more than {_count(context.get('max_length'))} items"
    if kind == "greater_than_equal":
        return f"is less than {_count(context.get('ge'))}"
    if kind == "less_than_equal":
        return f"is more than {_count(context.get('le'))}"
    if kind == "string_pattern_mismatch":
        is_id = schema.get("pattern") == MEMORY_ID_PATTERN
        return "is not a memory's id" if is_id else "does not have the form it takes"
    if kind == "value_error":
        # Raised by this package's own validators (squirrel_mcp.core.models): rules in words.
        return str(error["msg"]).removeprefix("Value error, ")
    if WRONG_KIND.fullmatch(kind):
        items = schema.get("items", {}) if item else schema
        return f"is not {KINDS.get(str(items.get('type')), 'of the kind it takes')}"
    return "is not valid"


def rule_and_remedy(error: ErrorDetails, schema: Mapping[str, Any]) -> str:
    """A form field's problem without its name or value: "is not one of the values it takes: send ..."."""
    item = any(isinstance(part, int) for part in error["loc"])
    return f"{_rule(error, schema, item)}: send {wanted(schema.get('items', {}) if item else schema)}"


def _problem(error: ErrorDetails, properties: Mapping[str, Any], required: Sequence[str]) -> str | None:
    """One field's problem as a clause: "`limit` is more than 50: send a whole number from 1 to 50".

    None for the member of a union that only says the input is not null: inputs take no
    null, so that member is never what was meant.
    """
    field, *rest = error["loc"] or ("arguments",)
    # A union's member names its type ("none", "constrained-int", "list[...]"): the field is the same.
    if any(part == "none" for part in rest):
        return None
    index = next((part for part in rest if isinstance(part, int)), None)
    schema = properties.get(str(field), {})
    subject = f"`{field}`" if index is None else f"item {index + 1} of `{field}`"
    send = wanted(schema) if schema else "what the tool's description says"
    optional = "" if str(field) in required or not schema else ", or leave it out"
    return f"{subject} {_rule(error, schema, index is not None)}: send {send}{optional}"


def describe_invalid(tool: str, errors: Sequence[ErrorDetails], schema: Mapping[str, Any]) -> str:
    """The sentence refusing a tool's arguments; `schema` is the tool's input schema.

    An unknown argument is named with the one it probably meant, and the arguments the
    tool takes are listed. Each field is said once, with its first problem.
    """
    properties: Mapping[str, Any] = schema.get("properties", {})
    required: Sequence[str] = schema.get("required", [])
    problems: list[str] = []
    said: set[str] = set()
    unknown = False
    for error in errors:
        field = str(error["loc"][0]) if error["loc"] else ""
        if error["type"] == "extra_forbidden" and len(error["loc"]) == 1:
            unknown = True
            problem: str | None = _unknown(field, list(properties))
        elif field in said:
            # Forty bad tags are one problem of `tags`: the first says what to fix.
            continue
        else:
            problem = _problem(error, properties, required)
        if problem is not None:
            said.add(field)
            problems.append(problem)
    # Many unknown arguments: the first few say what to fix.
    if len(problems) > MAX_PROBLEMS:
        problems[MAX_PROBLEMS:] = [f"and {len(problems) - MAX_PROBLEMS} more"]
    takes = f" ({tool} takes {', '.join(properties) or 'no arguments'})" if unknown else ""
    sentence = f"invalid arguments for {tool}: " + "; ".join(problems or ["they are not valid"]) + takes
    return sentence if sentence.endswith("?") else sentence + "."


def validation_errors(error: ValidationError) -> list[ErrorDetails]:
    """The errors of a refused validation, without the rejected values."""
    return error.errors(include_input=False, include_url=False)


def null_errors(arguments: Mapping[str, Any], known: Sequence[str]) -> list[ErrorDetails]:
    """An error for each input the tool takes that was sent as null (absent is how to leave one out)."""
    return [
        {"type": "null", "loc": (name,), "msg": "null", "input": None}
        for name, value in arguments.items()
        if value is None and name in known
    ]
