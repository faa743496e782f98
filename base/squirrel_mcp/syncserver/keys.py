"""API keys: a key is shown once to its owner; the server keeps only its SHA-256.

A key is 32 random bytes, so a plain SHA-256 (rather than a slow password hash)
is enough to make the stored hash useless to whoever reads the database: there
is nothing to guess. The `sqk_` prefix lets secret scanners and people tell a
squirrel key from other tokens.
"""

from __future__ import annotations

import hashlib
import re
import secrets

KEY_PREFIX = "sqk_"
_KEY_PATTERN = re.compile(r"sqk_[A-Za-z0-9_-]{43}")
_BEARER = re.compile(r"Bearer ([^\s]+)", re.IGNORECASE)


def new_key() -> str:
    """A fresh API key: `sqk_` and 43 URL-safe base64 characters (256 random bits)."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


# Characters after `sqk_` kept to tell keys apart in `list-keys`: 48 of the 256
# random bits, which leaves the rest far beyond guessing.
DISPLAY_CHARS = 8


def display_prefix(key: str) -> str:
    """What the database keeps of a key to show it: `sqk_` and its next 8 characters."""
    return key[: len(KEY_PREFIX) + DISPLAY_CHARS]


def key_hash(key: str) -> bytes:
    """What the database stores for a key."""
    return hashlib.sha256(key.encode("ascii")).digest()


def key_from_header(authorization: str | None) -> str | None:
    """The well-formed key in an `Authorization: Bearer ...` header, or None."""
    if authorization is None:
        return None
    match = _BEARER.fullmatch(authorization.strip())
    if match is None or _KEY_PATTERN.fullmatch(match.group(1)) is None:
        return None
    return match.group(1)
