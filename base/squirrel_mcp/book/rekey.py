"""Changing the passphrase, the verifier that guards it, and what a failed unlock can tell.

A change wraps the account's data key under the new passphrase, with a fresh
salt and the default scrypt cost (`rekey`), and swaps the account's key for the
new one with `Storage.replace_key`, a compare-and-swap. The records are sealed
under the data key, which stays the same, so they are not touched; and the swap
is one atomic write, so a kill at any moment leaves the old key or the new one:
exactly one of the two passphrases unlocks. A server already running keeps its
data key in memory and keeps working; it needs the new passphrase at its next
start.

Only a holder of the data key may swap the key: the change carries the data
key's key-change proof (`crypto.key_change_proof`), which storage checks against
the account's verifier, SHA-256 of it, stored when the account was made. An API
key of a sync server gives neither. An account made before verifiers were kept
gets its verifier from the first client that unlocks it (`ensure_verifier`).

Each machine remembers, in its cache directory, a fingerprint of the account
key it last unlocked or set (SHA-256 of the account id, the KDF parameters and
the wrapped key, all of which storage holds in the open: not a secret), and
whether it set that key itself. When a passphrase then fails, `explain` says
what this machine can tell: that the key is the one it set itself, or that the
key changed since it last unlocked it (then it cannot tell a passphrase changed
elsewhere from a wrong one, nor a change by a passphrase holder from anyone
else's); with the remembered key, only that the passphrase is wrong.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from squirrel_mcp.core.files import atomic_write
from squirrel_mcp.core.models import now_iso, parse_iso
from squirrel_mcp.keys import crypto
from squirrel_mcp.storage import FINGERPRINT_SHOWN, Account, Storage

_ACCOUNT_ID = re.compile(r"[0-9a-f]{32}")


class PassphraseChangedError(crypto.WrongPassphraseError):
    """The passphrase does not unlock the account, whose key is not the one this machine last unlocked."""


class _KnownKey(BaseModel):
    """The file's contents: the key's fingerprint, and when this machine set that key (if it did)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str = Field(pattern=r"^[0-9a-f]{64}$")
    changedHere: str | None = None


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
    key = account.fingerprint()
    known = _read(cache_dir, account.account_id)
    if known is not None and known.key == key and not changed_here:
        return
    record = _KnownKey(key=key, changedHere=now_iso() if changed_here else None)
    atomic_write(known_key_path(cache_dir, account.account_id), record.model_dump_json().encode())


def explain(
    cache_dir: Path, account: Account | None, where: str, *, remote: bool = False
) -> PassphraseChangedError | None:
    """What this machine can tell of a passphrase that failed on `account` (read after the failure).

    A PassphraseChangedError when the key is not the one this machine remembers
    (it changed since: this machine cannot tell a new passphrase from a wrong
    one), or is the one it set itself with `squirrel-mcp passphrase`; None when
    it knows nothing more than "wrong passphrase". `remote`: the account is on a
    sync server, whose operator can put an earlier key back.
    """
    if account is None:
        return None
    known = _read(cache_dir, account.account_id)
    if known is None:
        return None
    if known.key != account.fingerprint():
        if remote:
            how = "with `squirrel-mcp passphrase` on another machine"
            otherwise = (
                "; if nobody changed it, the sync server's operator can put back the key this machine "
                f"last unlocked, fingerprint {known.key[:FINGERPRINT_SHOWN]} (`squirrel-mcp-sync "
                "list-account-keys`, then `restore-account-key`)"
            )
        else:
            how = "with `squirrel-mcp passphrase` elsewhere, or the vault was restored from a backup"
            otherwise = ""
        return PassphraseChangedError(
            f"the passphrase does not unlock {where}: the account's wrapped key changed since this machine "
            f"last unlocked it, so either its passphrase was changed meanwhile ({how}) or the passphrase "
            "given is wrong, and this machine cannot tell which. If it was changed, set SQUIRREL_PASSPHRASE "
            f"(in your MCP client's config too) to the new passphrase{otherwise}"
        )
    if known.changedHere is None:
        return None
    try:
        when = f"{parse_iso(known.changedHere):%Y-%m-%d %H:%M} UTC"
    except ValueError:
        when = "earlier"
    return PassphraseChangedError(
        f"the passphrase does not unlock {where}: its key is the one `squirrel-mcp passphrase` set on "
        f"this machine ({when}), which opens with the new passphrase given then; set SQUIRREL_PASSPHRASE "
        "(in your MCP client's config too) to that one"
    )


def rekey(account: Account, data_key: bytes, new_passphrase: str) -> Account:
    """`account` with its data key wrapped under `new_passphrase`: a fresh salt, the default cost.

    Its verifier is the data key's, as the account must already hold (`ensure_verifier`).
    """
    kdf = crypto.KdfParams.new()
    wrapped = crypto.wrap_data_key(new_passphrase, kdf, account.account_id, data_key)
    return Account(account.account_id, kdf, wrapped, verifier(data_key))


def verifier(data_key: bytes) -> bytes:
    """The key-change verifier of the account whose data key this is."""
    return crypto.key_change_verifier(crypto.key_change_proof(data_key))


def ensure_verifier(storage: Storage, account: Account, proof: bytes) -> bool | None:
    """Make sure the account (`account`, as read) holds the verifier of `proof`; whether it does.

    An account made before verifiers were kept gets it now, once. False: it holds
    another verifier, which no client made (every client's is its data key's):
    someone holding the API key, not the passphrase, set it on such an account.
    None: the storage keeps no verifier (a sync server from before them).
    """
    mine = crypto.key_change_verifier(proof)
    held = account.key_change_verifier
    if held is None:
        held = storage.set_key_change_verifier(mine)
        if held is None:
            return None
    return crypto.proves_key_change(held, proof)
