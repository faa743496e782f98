"""Every outside input of the sync server, checked against the contract's models.

Request bodies are checked by the models of `squirrel_mcp.storage.wire`; the
query string of `GET /v1/records` by `changes_query`. A refusal is
InvalidRequest with a message that names the field and the rule, never the
value: a request could carry anything, and error messages end up in logs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from squirrel_mcp.storage.wire import (
    CIPHERTEXT_CHARS,
    DEFAULT_PAGE,
    MAX_CURSOR,
    MAX_PAGE,
    MAX_RECORDS_PER_APPEND,
)

_DIGITS = re.compile(r"[0-9]+")
_M = TypeVar("_M", bound=BaseModel)

# The largest body an append can need: its most records, each as long as its
# fields allow, with the spaces a common encoder puts after ":" and "," and some
# more for indentation. The server reads no more than this, so no request costs
# it more than one full append's worth of memory and parsing.
_RECORD_ENVELOPE = '{"memoryId": "0123456789abcdef", "revision": 2147483647, "ciphertext": ""}, '
_WHITESPACE_PER_RECORD = 64
_LARGEST_APPEND = MAX_RECORDS_PER_APPEND * (
    len(_RECORD_ENVELOPE) + CIPHERTEXT_CHARS[1] + _WHITESPACE_PER_RECORD
) + len('{"records": []}\n')
# Rounded up to whole MiB, a figure a reverse proxy's body limit can repeat: 32 MiB.
MAX_BODY_BYTES = -(-_LARGEST_APPEND // 2**20) * 2**20


class InvalidRequest(Exception):
    """The request does not match the contract; the message says where, not what."""


def request_body(model: type[_M], document: object) -> _M:
    """`document` (decoded JSON) as `model`; InvalidRequest naming the first problem."""
    try:
        return model.model_validate(document)
    except ValidationError as error:
        raise InvalidRequest(validation_problem(error)) from None


def changes_query(query: Mapping[str, str]) -> tuple[int, int]:
    """`after` and `limit` of `GET /v1/records` (defaults 0 and 500)."""
    after = _query_integer(query.get("after"), "after", 0, MAX_CURSOR, default=0)
    limit = _query_integer(query.get("limit"), "limit", 1, MAX_PAGE, default=DEFAULT_PAGE)
    return after, limit


def _query_integer(value: str | None, where: str, low: int, high: int, *, default: int) -> int:
    if value is None:
        return default
    # Digits only: no sign, no spaces, no "1e3"; and short enough that int() is cheap.
    if _DIGITS.fullmatch(value) is None or len(value) > len(str(high)) or not low <= int(value) <= high:
        raise InvalidRequest(f"{where} must be an integer from {low} to {high}")
    return int(value)


def validation_problem(error: ValidationError) -> str:
    """The first problem of `error` as "WHERE: RULE", naming no value it was given.

    Pydantic's messages state the rule; its locations are field names and list
    indices, except an unknown field's, which is the sender's key and so left out.
    """
    first = error.errors(include_url=False, include_input=False, include_context=False)[0]
    location = list(first["loc"])
    kind = first["type"]
    if kind == "extra_forbidden":
        location = location[:-1]
        rule = "has fields the contract does not define"
    elif kind == "model_type":
        rule = "must be a JSON object"
    elif kind in ("too_long", "too_short"):
        # Their messages also count what was sent; the bound alone is the rule.
        rule = first["msg"].split(" after validation")[0].split(", not ")[0]
    else:
        rule = first["msg"]
    if not location and kind.startswith("kdf_"):
        return rule  # the KDF's checks name their field themselves
    where = ""
    for part in location:
        where += f"[{part}]" if isinstance(part, int) else (f".{part}" if where else str(part))
    return f"{where or 'the body'}: {rule}"
