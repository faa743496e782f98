"""Changing the passphrase, and telling a machine whose passphrase is out of date that it was changed.

A change wraps the account's data key under the new passphrase, with a fresh
salt and the default scrypt cost (`rekey`), and swaps the account's key for the
new one with `Storage.replace_key`, a compare-and-swap. The records are sealed
under the data key, which stays the same, so they are not touched; and the swap
is one atomic write, so a kill at any moment leaves the old key or the new one:
exactly one of the two passphrases unlocks. A server already running keeps its
data key in memory and keeps working; it needs the new passphrase at its next
start.

Each machine remembers, in its cache directory, a fingerprint of the account
key it last unlocked or set (SHA-256 of the account id, the KDF parameters and
the wrapped key, all of which storage holds in the open: not a secret), and
whether it set that key itself. When a passphrase then fails, `explain` tells
apart "the passphrase was changed" (on another machine, or the vault was
restored from a backup: the key is not the one remembered; or on this machine:
the key is the one this machine set) from a passphrase that is merely wrong.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from squirrel_mcp.core.files import atomic_write
from squirrel_mcp.core.models import now_iso, parse_iso
from squirrel_mcp.keys import crypto
from squirrel_mcp.storage import Account

_ACCOUNT_ID = re.compile(r"[0-9a-f]{32}")


class PassphraseChangedError(crypto.WrongPassphraseError):
    """The passphrase does not unlock the account, whose passphrase was changed since this machine knew it."""


class _KnownKey(BaseModel):
    """The file's contents: the key's fingerprint, and when this machine set that key (if it did)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str = Field(pattern=r"^[0-9a-f]{64}$")
    changedHere: str | None = None


def fingerprint(account: Account) -> str:
    """SHA-256 (hex) of what the passphrase unlocks: account id, KDF salt and parameters, wrapped key."""
    kdf = account.kdf
    material = (
        f"{account.account_id}|{kdf.salt.hex()}|{kdf.n}|{kdf.r}|{kdf.p}|{account.wrapped_data_key.hex()}"
    )
    return hashlib.sha256(material.encode()).hexdigest()


def known_key_path(cache_dir: Path, account_id: str) -> Path:
    """The file remembering the key of account `account_id` this machine last unlocked or set."""
    if not _ACCOUNT_ID.fullmatch(account_id):
        # Storage checked it already; anything else must not become part of a path.
        raise ValueError("the account id cannot name a file")
    return cache_dir / f"known-key-{account_id}.json"


def _read(cache_dir: Path, account_id: str) -> _KnownKey | None:
    """The remembered key; None if none is, or the file is unreadable (it is only a hint)."""
    try:
        return _KnownKey.model_validate_json(known_key_path(cache_dir, account_id).read_bytes())
    except (OSError, ValidationError):
        return None


def remember(cache_dir: Path, account: Account, *, changed_here: bool = False) -> None:
    """Remember `account`'s key as the one this machine unlocked (or, `changed_here`, set).

    Written (atomically, mode 0600) only when it differs from what is remembered.
    Raises OSError when the cache directory cannot be written.
    """
    key = fingerprint(account)
    known = _read(cache_dir, account.account_id)
    if known is not None and known.key == key and not changed_here:
        return
    record = _KnownKey(key=key, changedHere=now_iso() if changed_here else None)
    atomic_write(known_key_path(cache_dir, account.account_id), record.model_dump_json().encode())


def explain(cache_dir: Path, account: Account | None, where: str) -> PassphraseChangedError | None:
    """Why a passphrase failed on `account` (read after the failure), when this machine can tell.

    A PassphraseChangedError when the key is not the one this machine remembers
    (changed elsewhere, or the vault restored from a backup), or is the one it set
    itself with `squirrel-mcp passphrase`; None when it cannot tell (a wrong passphrase).
    """
    if account is None:
        return None
    known = _read(cache_dir, account.account_id)
    if known is None:
        return None
    todo = "set SQUIRREL_PASSPHRASE (in your MCP client's config too) to the passphrase now in use"
    if known.key != fingerprint(account):
        return PassphraseChangedError(
            f"the passphrase does not unlock {where}: the passphrase was changed since this machine last "
            f"unlocked it (with `squirrel-mcp passphrase` on another machine, or the vault was restored "
            f"from a backup); {todo}"
        )
    if known.changedHere is None:
        return None
    try:
        when = f"{parse_iso(known.changedHere):%Y-%m-%d %H:%M} UTC"
    except ValueError:
        when = "earlier"
    return PassphraseChangedError(
        f"the passphrase does not unlock {where}: the passphrase was changed on this machine with "
        f"`squirrel-mcp passphrase` ({when}); {todo}"
    )


def rekey(account: Account, data_key: bytes, new_passphrase: str) -> Account:
    """`account` with its data key wrapped under `new_passphrase`: a fresh salt, the default cost."""
    kdf = crypto.KdfParams.new()
    wrapped = crypto.wrap_data_key(new_passphrase, kdf, account.account_id, data_key)
    return Account(account.account_id, kdf, wrapped)
