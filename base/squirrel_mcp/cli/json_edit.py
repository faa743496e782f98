"""Edit a JSON document as text: add or remove one member, every other byte left as it was.

`squirrel-mcp hooks install` writes into settings files people edit by hand (Claude Code's,
Codex's, Gemini CLI's). Parsing and dumping the whole file would reformat it: keys on one
line, number spellings, escapes. Here a member is inserted after the container's last one,
with the indentation of its siblings, and a removal takes out exactly what an insertion
added, so that install then uninstall gives back the original bytes.

The text given must already be valid JSON (json.loads accepted it): the scanner below trusts
its structure.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

_SPACE = re.compile(r"[ \t\n\r]*")
_INDENT = re.compile(r"[ \t]*")
_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class Member:
    """One member of an object or array: where it starts (its key, in an object) and its value's span."""

    start: int
    value: int
    end: int
    key: str | None


def _skip(text: str, at: int) -> int:
    match = _SPACE.match(text, at)
    assert match is not None  # the pattern matches the empty string
    return match.end()


def root(text: str) -> int:
    """Where the document's top-level value starts."""
    return _skip(text, 0)


def members(text: str, opening: int) -> tuple[list[Member], int]:
    """The members of the object or array opening at `opening`, and where its closing bracket is."""
    is_object = text[opening] == "{"
    closing = "}" if is_object else "]"
    at = _skip(text, opening + 1)
    found: list[Member] = []
    if text[at] == closing:
        return found, at
    while True:
        start, key = at, None
        if is_object:
            key, at = _DECODER.raw_decode(text, at)
            at = _skip(text, _skip(text, at) + 1)  # past the colon
        _value, end = _DECODER.raw_decode(text, at)
        found.append(Member(start, at, end, key))
        at = _skip(text, end)
        if text[at] != ",":
            return found, at
        at = _skip(text, at + 1)


def find(text: str, opening: int, key: str) -> Member | None:
    """The member named `key` of the object opening at `opening` (the last one, as json.loads keeps)."""
    named = [member for member in members(text, opening)[0] if member.key == key]
    return named[-1] if named else None


def _line_indent(text: str, at: int) -> str:
    """The spaces and tabs that start the line holding `at`."""
    start = text.rfind("\n", 0, at) + 1
    match = _INDENT.match(text, start)
    assert match is not None
    return match.group()


def _own_line(text: str, at: int) -> bool:
    """Whether only white space comes before `at` on its line (and it is not the first line)."""
    start = text.rfind("\n", 0, at)
    return start >= 0 and not text[start + 1 : at].strip()


def _layout(text: str) -> tuple[str, str]:
    """The document's line ending and one level of indentation ("" and "": all on one line)."""
    newline = "\r\n" if "\r\n" in text else "\n"
    if "\n" not in text.strip():
        return "", ""
    indents = re.findall(r"\n([ \t]+)\S", text)
    return newline, min(indents, key=len) if indents else "  "


def insert(text: str, opening: int, key: str | None, value: object) -> str:
    """`text` with `value` (named `key` in an object) added as the last member of the container at `opening`.

    Laid out as its siblings are: on a line of its own with their indentation, or after them on
    their line; in an empty container, one level deeper than the line that opens it.
    """
    newline, unit = _layout(text)
    found, closing = members(text, opening)
    if found and not _own_line(text, found[-1].start):
        newline = unit = ""
    indent = _line_indent(text, found[-1].start) if found else _line_indent(text, opening) + unit
    dumped = json.dumps(value, indent=unit if newline else None, ensure_ascii=False)
    dumped = dumped.replace("\n", newline + indent)
    member = dumped if key is None else f"{json.dumps(key, ensure_ascii=False)}: {dumped}"
    if found:
        space = newline + indent if newline else " "
        return f"{text[: found[-1].end]},{space}{member}{text[found[-1].end :]}"
    tail = newline + _line_indent(text, opening) if newline else ""
    return f"{text[: opening + 1]}{newline + indent}{member}{tail}{text[closing:]}"


def remove(text: str, opening: int, index: int) -> str:
    """`text` without the `index`th member of the container at `opening`, as `insert` had added it."""
    found, closing = members(text, opening)
    gone = found[index]
    if len(found) == 1:
        return text[: opening + 1] + text[closing:]
    if index > 0:
        return text[: found[index - 1].end] + text[gone.end :]
    return text[: gone.start] + text[found[1].start :]
