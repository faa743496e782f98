"""Every outside input of the sync server, checked against docs/api/openapi.yaml.

Each function takes what JSON decoding (or the query string) produced and
returns typed values, or raises InvalidRequest with a message that names the
field and the rule, never the value: a request could carry anything, and
error messages end up in logs.

The rules are the contract's schemas, written out by hand so that a reader sees
them in one place; tests/sync/test_contract.py checks the two agree by fuzzing
the server with the contract.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from typing import Any

from squirrel_mcp.crypto import KDF_N_RANGE, KDF_P_RANGE, KDF_R_RANGE, kdf_cost_problem
from squirrel_mcp.syncserver.database import NewAccount, NewRecord

ACCOUNT_ID = re.compile(r"[0-9a-f]{32}")
MEMORY_ID = re.compile(r"[0-9a-f]{16}")
_BASE64 = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")
# 16 bytes in canonical base64: the last character carries 2 bits, the rest zero.
_SALT = re.compile(r"[A-Za-z0-9+/]{21}[AQgw]==")
_DIGITS = re.compile(r"[0-9]+")

MAX_REVISION = 2**31 - 1
MAX_CURSOR = 2**63 - 1
# Bounds are on the base64 text, as the contract can state them exactly there.
# A wrapped data key is 61 bytes today (84 characters); up to 1 KiB is accepted.
WRAPPED_KEY_CHARS = (84, 1368)
# A sealed revision: format byte, nonce and tag around the plaintext (29 bytes,
# 40 characters, for an empty one); up to 48 KiB (65,536 characters), where a
# memory with every field at its maximum, in 4-byte characters, seals to about
# 32 KiB.
CIPHERTEXT_CHARS = (40, 65_536)
MAX_RECORDS_PER_APPEND = 500
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
DEFAULT_PAGE = 500
MAX_PAGE = 1000


class InvalidRequest(Exception):
    """The request does not match the contract; the message says where, not what."""


def _object(value: Any, where: str, required: set[str]) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise InvalidRequest(f"{where} must be a JSON object")
    missing = required - value.keys()
    if missing:
        raise InvalidRequest(f"{where} lacks {', '.join(sorted(missing))}")
    unknown = value.keys() - required
    if unknown:
        raise InvalidRequest(f"{where} has fields the contract does not define")
    return value


def _integer(value: Any, where: str, low: int, high: int) -> int:
    # JSON Schema counts 3.0 as an integer; bool is an int subclass in Python but not in JSON.
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequest(f"{where} must be an integer")
    if not low <= value <= high:
        raise InvalidRequest(f"{where} must be from {low} to {high}")
    return value


def _text(value: Any, where: str, pattern: re.Pattern[str], rule: str) -> str:
    if not isinstance(value, str) or pattern.fullmatch(value) is None:
        raise InvalidRequest(f"{where} must be {rule}")
    return value


def _base64(value: Any, where: str, chars: tuple[int, int], pattern: re.Pattern[str] = _BASE64) -> bytes:
    low, high = chars
    # The length first, so an oversized value is never matched or decoded.
    if not isinstance(value, str) or not low <= len(value) <= high:
        raise InvalidRequest(f"{where} must be base64 of {low} to {high} characters")
    text = _text(value, where, pattern, "padded standard base64")
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error:  # unreachable after the pattern; kept as the last word
        raise InvalidRequest(f"{where} must be padded standard base64") from None


def new_account(body: Any) -> NewAccount:
    """The account of a `POST /v1/account` body."""
    fields = _object(body, "the body", {"id", "kdf", "wrappedDataKey"})
    kdf = _object(fields["kdf"], "kdf", {"alg", "salt", "n", "r", "p"})
    if kdf["alg"] != "scrypt":
        raise InvalidRequest('kdf.alg must be "scrypt"')
    n = _integer(kdf["n"], "kdf.n", *KDF_N_RANGE)
    if n & (n - 1):
        raise InvalidRequest("kdf.n must be a power of two")
    r = _integer(kdf["r"], "kdf.r", *KDF_R_RANGE)
    p = _integer(kdf["p"], "kdf.p", *KDF_P_RANGE)
    # The same bounds on memory (128·N·r) and work (N·r·p) as every client applies,
    # so the server never stores an account its clients would refuse to unlock.
    problem = kdf_cost_problem(n, r, p)
    if problem is not None:
        raise InvalidRequest(problem)
    return NewAccount(
        account_id=_text(fields["id"], "id", ACCOUNT_ID, "32 lowercase hex digits"),
        salt=_base64(kdf["salt"], "kdf.salt", (24, 24), _SALT),
        n=n,
        r=r,
        p=p,
        wrapped_data_key=_base64(fields["wrappedDataKey"], "wrappedDataKey", WRAPPED_KEY_CHARS),
    )


def append_request(body: Any) -> list[NewRecord]:
    """The records of a `POST /v1/records` body."""
    records = _object(body, "the body", {"records"})["records"]
    if not isinstance(records, list):
        raise InvalidRequest("records must be an array")
    if len(records) > MAX_RECORDS_PER_APPEND:
        raise InvalidRequest(f"records holds more than {MAX_RECORDS_PER_APPEND} items")
    parsed = []
    for index, item in enumerate(records):
        where = f"records[{index}]"
        fields = _object(item, where, {"memoryId", "revision", "ciphertext"})
        parsed.append(
            NewRecord(
                memory_id=_text(
                    fields["memoryId"], f"{where}.memoryId", MEMORY_ID, "16 lowercase hex digits"
                ),
                revision=_integer(fields["revision"], f"{where}.revision", 1, MAX_REVISION),
                ciphertext=_base64(fields["ciphertext"], f"{where}.ciphertext", CIPHERTEXT_CHARS),
            )
        )
    return parsed


def changes_query(query: Mapping[str, str]) -> tuple[int, int]:
    """`after` and `limit` of `GET /v1/records` (defaults 0 and 500)."""
    after = _query_integer(query.get("after"), "after", 0, MAX_CURSOR, default=0)
    limit = _query_integer(query.get("limit"), "limit", 1, MAX_PAGE, default=DEFAULT_PAGE)
    return after, limit


def _query_integer(value: str | None, where: str, low: int, high: int, *, default: int) -> int:
    if value is None:
        return default
    # Digits only: no sign, no spaces, no "1e3"; and short enough that int() is cheap.
    if _DIGITS.fullmatch(value) is None or len(value) > len(str(high)):
        raise InvalidRequest(f"{where} must be an integer from {low} to {high}")
    return _integer(int(value), where, low, high)
