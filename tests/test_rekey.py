"""A passphrase change's pieces in this process: the vault's compare-and-swap, its proof, the known key."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from squirrel_mcp.book import rekey
from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.keys import crypto
from squirrel_mcp.storage import Account, KeyChanged, KeyChangeForbidden
from squirrel_mcp.storage.local import LocalVault
from tests.conftest import PASSPHRASE

CHEAP_KDF = crypto.KdfParams(salt=b"k" * crypto.SALT_BYTES, n=2**14)
NEW = "a new passphrase, long enough"


@pytest.fixture
def vault(tmp_path: Path) -> LocalVault:
    vault = LocalVault(tmp_path / "vault.sqlite3", create=True)
    store = MemoryStore.create(vault, PASSPHRASE, CHEAP_KDF)
    store.save(entity="user", text="Keeps bees", category="fact", tags=[], keywords=[])
    return vault


def data_key(account: Account, passphrase: str) -> bytes:
    return crypto.unwrap_data_key(passphrase, account.kdf, account.account_id, account.wrapped_data_key)


def test_rekey_wraps_the_same_data_key_under_a_fresh_salt_at_the_default_cost(vault: LocalVault) -> None:
    account = vault.load_account()
    assert account is not None
    key = data_key(account, PASSPHRASE)
    new = rekey.rekey(account, key, NEW)
    assert new.account_id == account.account_id and new.kdf.salt != account.kdf.salt
    assert (new.kdf.n, new.kdf.r, new.kdf.p) == (
        crypto.DEFAULT_KDF_N,
        crypto.DEFAULT_KDF_R,
        crypto.DEFAULT_KDF_P,
    )
    assert data_key(new, NEW) == key
    with pytest.raises(crypto.WrongPassphraseError):
        data_key(new, PASSPHRASE)
    # The verifier is the data key's, made at creation, and a passphrase change keeps it.
    assert new.key_change_verifier == account.key_change_verifier == rekey.verifier(key)
    assert account.key_change_verifier == crypto.key_change_verifier(
        crypto.derive_key(key, "account-key-change")
    )


def test_the_vault_swaps_the_key_only_over_the_one_read(vault: LocalVault) -> None:
    read = vault.load_account()
    assert read is not None
    key = data_key(read, PASSPHRASE)
    proof = crypto.key_change_proof(key)
    first = rekey.rekey(read, key, NEW)
    vault.replace_key(read, first, proof)
    assert vault.load_account() == first
    # A second change still holding the key read before the first: refused, nothing changed.
    second = rekey.rekey(read, key, "yet another passphrase")
    with pytest.raises(KeyChanged, match="changed by another process since it was read; nothing was changed"):
        vault.replace_key(read, second, proof)
    # Without the data key's proof: refused before anything else, nothing changed.
    with pytest.raises(KeyChangeForbidden, match="does not prove it holds the data key"):
        vault.replace_key(first, second, bytes(32))
    assert vault.load_account() == first
    with pytest.raises(ValueError, match="cannot change the account id"):
        vault.replace_key(first, Account("0" * 32, first.kdf, first.wrapped_data_key), proof)
    # The records are the data key's: they read as before under the new passphrase.
    texts = [memory.text for memory in MemoryStore.unlock(vault, NEW).current()]
    assert texts == ["Keeps bees"]


def test_the_remembered_key_tells_a_changed_passphrase_from_a_wrong_one(
    vault: LocalVault, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    account = vault.load_account()
    assert account is not None
    where = "the vault at V"
    assert rekey.explain(cache, account, where) is None  # nothing remembered: cannot tell
    rekey.remember(cache, account)
    path = rekey.known_key_path(cache, account.account_id)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text()) == {"key": account.fingerprint(), "changedHere": None}
    assert rekey.explain(cache, account, where) is None  # the same key: the passphrase is wrong

    changed = rekey.rekey(account, data_key(account, PASSPHRASE), NEW)
    elsewhere = rekey.explain(cache, changed, where)
    assert isinstance(elsewhere, crypto.WrongPassphraseError)
    # What it can tell (the key changed), and that it cannot tell a new passphrase from a wrong one.
    assert "the account's wrapped key changed since this machine last unlocked it" in str(elsewhere)
    assert "or the passphrase given is wrong, and this machine cannot tell which" in str(elsewhere)
    assert str(elsewhere).startswith("the passphrase does not unlock the vault at V")
    assert "now in use" not in str(elsewhere) and "operator" not in str(elsewhere)
    # On a sync server: the operator can put back the key this machine knew, named by its fingerprint.
    remote = str(rekey.explain(cache, changed, where, remote=True))
    assert f"fingerprint {account.fingerprint()[:12]} (`squirrel-mcp-sync list-account-keys`" in remote

    rekey.remember(cache, changed, changed_here=True)
    here = rekey.explain(cache, changed, where)
    assert here is not None and "its key is the one `squirrel-mcp passphrase` set on this machine (" in str(
        here
    )
    assert "now in use" not in str(here)
    # An unlock of the same key keeps the note; of another key, forgets it.
    rekey.remember(cache, changed)
    assert rekey.explain(cache, changed, where) is not None
    rekey.remember(cache, account)
    assert rekey.explain(cache, account, where) is None

    for damaged in (b"", b"{", b'{"key": "not hex"}', b"[1]"):
        path.write_bytes(damaged)
        assert rekey.explain(cache, changed, where) is None  # a hint only: unreadable is "unknown"
    with pytest.raises(ValueError, match="cannot name a file"):
        rekey.known_key_path(cache, "../elsewhere")
