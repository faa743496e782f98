"""Only a holder of the data key replaces an account's key: an API key is not enough (SQLite and PostgreSQL).

The attack of the second outside review, through the real `squirrel-mcp-sync`
over HTTP: GET the account, PUT `expected` as read and a random new key. It was
stored (200) and locked every machine out for good. Now a key change must carry
the data key's key-change proof, which the account's verifier checks, and the
attack gets 403 while the right passphrase still unlocks. The real
`squirrel-mcp passphrase` still changes the key for every machine; the server
keeps the keys an account held, which `squirrel-mcp-sync list-account-keys` and
`restore-account-key` list and put back. An account made before verifiers (a
schema 2 database) gets its verifier from the first client that unlocks it; a
key holder who sets one of its own first is seen by the client and undone by
the operator.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import secrets
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests

from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.book.transfer import export_json
from squirrel_mcp.keys import crypto
from squirrel_mcp.storage.local import LocalVault
from tests.conftest import PASSPHRASE, run_cli
from tests.sync.conftest import SyncServer, start_sync_server
from tests.sync.test_passphrase_sync import machine
from tests.sync.test_sync_keys import _old_database, issue, sync
from tests.test_passphrase import NEW, change

pytestmark = pytest.mark.process

CHEAP_KDF = crypto.KdfParams(salt=b"v" * crypto.SALT_BYTES, n=2**14)
TEXT = "Keeps the spare key under the blue flowerpot"
# One line of list-account-keys: the key it holds, or an earlier one with the dates it was set and replaced.
_CURRENT = re.compile(
    r"current\tfingerprint (?P<fingerprint>[0-9a-f]{12})\tset (?P<set>\S+)\t"
    r"scrypt N=\d+ r=\d+ p=\d+\t(?P<verifier>verifier set|no verifier)"
)
_EARLIER = re.compile(
    r"(?P<id>\d+)\tfingerprint (?P<fingerprint>[0-9a-f]{12})\tset (?P<set>\S+)\t"
    r"replaced (?P<replaced>\S+Z)\tscrypt N=\d+ r=\d+ p=\d+"
)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def account_keys(database_url: str, key_id: str = "1") -> tuple[dict[str, str], list[dict[str, str]]]:
    """`list-account-keys KEY_ID`: the key the account holds, then its earlier ones, newest first."""
    done = sync(database_url, "list-account-keys", key_id)
    assert done.returncode == 0, done.stderr
    first, *rest = done.stdout.splitlines()
    current = _CURRENT.fullmatch(first)
    earlier = [_EARLIER.fullmatch(line) for line in rest]
    assert current is not None and all(earlier), done.stdout
    return current.groupdict(), [match.groupdict() for match in earlier if match is not None]


def put_key(server: SyncServer, body: object, key: str | None = None) -> requests.Response:
    return requests.put(server.url + "/v1/account/key", json=body, headers=server.headers(key), timeout=30)


def random_key_change(read: dict[str, Any], **extra: object) -> dict[str, Any]:
    """The review's attack: `expected` as GET returned it, a new key of random bytes."""
    new_kdf = {**read["kdf"], "salt": b64(os.urandom(16))}
    return {
        "expected": {"kdf": read["kdf"], "wrappedDataKey": read["wrappedDataKey"]},
        "new": {"kdf": new_kdf, "wrappedDataKey": b64(os.urandom(61))},
        **extra,
    }


def refused(answer: requests.Response) -> str:
    """The 403 of a key change without the data key's proof: its one line."""
    assert answer.status_code == 403, answer.text
    error = answer.json()["error"]
    assert error["code"] == "forbidden" and "\n" not in error["message"]
    return str(error["message"])


def exported(env: dict[str, str], passphrase: str) -> subprocess.CompletedProcess[bytes]:
    """`squirrel-mcp export` with `passphrase`: the real unlock."""
    return run_cli({**env, "SQUIRREL_PASSPHRASE": passphrase}, "export")


def seeded(server: SyncServer, tmp_path: Path) -> dict[str, str]:
    """A machine that made the account with `squirrel-mcp init` and imported one memory into it."""
    vault = LocalVault(tmp_path / "made-here.sqlite3", create=True)
    try:
        store = MemoryStore.create(vault, PASSPHRASE, CHEAP_KDF)
        store.save(entity="user", text=TEXT, category="fact", tags=[], keywords=[])
        (tmp_path / "memories.json").write_bytes(export_json(store).data)
    finally:
        vault.close()
    here = machine(tmp_path, "here", server)
    assert run_cli(here, "init").returncode == 0
    done = run_cli(here, "import", str(tmp_path / "memories.json"))
    assert done.returncode == 0, done.stderr
    return here


def test_an_api_key_alone_cannot_replace_the_key_and_the_passphrase_still_unlocks(
    sync_server: SyncServer, tmp_path: Path
) -> None:
    here = seeded(sync_server, tmp_path)
    read = sync_server.get("/v1/account").json()

    # The review's request exactly (no proof), then with a made-up proof: 403, one line, nothing stored.
    without = refused(put_key(sync_server, random_key_change(read)))
    assert without == (
        "a key change must prove it holds the account's data key, and this one's proof is missing or "
        "wrong; nothing was changed"
    )
    refused(put_key(sync_server, random_key_change(read, proof=b64(os.urandom(32)))))
    assert re.fullmatch(r"[A-Za-z0-9+/]{43}=", read["keyChangeVerifier"])  # init stored it
    # The verifier is no proof: its hash is.
    refused(put_key(sync_server, random_key_change(read, proof=read["keyChangeVerifier"])))
    # A null proof is no proof either, and not the contract's shape.
    assert put_key(sync_server, random_key_change(read, proof=None)).status_code == 400
    assert sync_server.get("/v1/account").json() == read
    current, earlier = account_keys(sync_server.database_url)
    assert earlier == [] and current["verifier"] == "verifier set"
    # Nor can the key holder replace the verifier it would need.
    other = {"keyChangeVerifier": b64(hashlib.sha256(os.urandom(32)).digest())}
    answer = requests.put(
        sync_server.url + "/v1/account/verifier", json=other, headers=sync_server.headers(), timeout=30
    )
    assert answer.status_code == 409 and answer.json()["error"]["code"] == "verifier_exists"
    assert sync_server.get("/v1/account").json() == read

    # The right passphrase still unlocks, here and on a machine that never saw the account.
    for env in (here, machine(tmp_path, "there", sync_server)):
        done = exported(env, PASSPHRASE)
        assert done.returncode == 0, done.stderr
        assert TEXT in done.stdout.decode()


def test_a_passphrase_change_reaches_every_machine_and_the_operator_can_undo_it(
    sync_server: SyncServer, tmp_path: Path
) -> None:
    here = seeded(sync_server, tmp_path)
    there, behind = machine(tmp_path, "there", sync_server), machine(tmp_path, "behind", sync_server)
    for env in (there, behind):
        assert exported(env, PASSPHRASE).returncode == 0  # each knows the key from now on
    before, _ = account_keys(sync_server.database_url)

    code, _, err = change(here, PASSPHRASE, NEW)
    assert code == 0, err
    done = exported(there, NEW)
    assert done.returncode == 0, done.stderr
    assert TEXT in done.stdout.decode()

    # The change is kept: the key it replaced is listed, with when it was set and replaced.
    current, (old,) = account_keys(sync_server.database_url)
    assert old["fingerprint"] == before["fingerprint"] and old["set"] == before["set"]
    assert current["fingerprint"] != before["fingerprint"] and current["set"] == old["replaced"]
    assert current["verifier"] == "verifier set"

    # A machine whose key changed says what it can tell and names the key it knew, not a passphrase "in use".
    line = exported(behind, PASSPHRASE).stderr.decode().strip()
    assert "the account's wrapped key changed since this machine last unlocked it" in line
    assert "or the passphrase given is wrong, and this machine cannot tell which" in line
    assert "now in use" not in line
    assert f"fingerprint {before['fingerprint']} (`squirrel-mcp-sync list-account-keys`" in line

    # The operator puts that key back: the first passphrase unlocks again, the new one no longer.
    done = sync(sync_server.database_url, "restore-account-key", "1", old["id"])
    assert done.returncode == 0, done.stderr
    assert f"holds its earlier key {old['id']} again (fingerprint {before['fingerprint']})" in done.stderr
    done = exported(behind, PASSPHRASE)
    assert done.returncode == 0, done.stderr
    assert TEXT in done.stdout.decode()
    assert exported(there, NEW).returncode == 1
    again, kept = account_keys(sync_server.database_url)
    assert again["fingerprint"] == before["fingerprint"]
    assert kept[0]["fingerprint"] == current["fingerprint"]  # the undo can be undone too
    # After a change because a passphrase leaked, the operator deletes the keys it opens.
    done = sync(sync_server.database_url, "forget-account-keys", "1")
    assert done.returncode == 0 and "keeps no earlier key now (2 deleted)" in done.stderr
    assert account_keys(sync_server.database_url) == (again, [])
    # An unknown earlier key, or a key whose slot has no account: one line, exit 1.
    done = sync(sync_server.database_url, "restore-account-key", "1", "999")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "squirrel-mcp-sync: the account of key 1 kept no earlier key 999 (list-account-keys lists them)"
    ]
    sync_server.issue_key()
    done = sync(sync_server.database_url, "list-account-keys", "2")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == ["squirrel-mcp-sync: key 2 opens a slot with no account yet"]


# Schema 2, as the previous server made it: no verifiers, no earlier keys.
_SCHEMA_2 = {
    "sqlite": ("BLOB", "INTEGER PRIMARY KEY"),
    "postgresql": ("BYTEA", "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY"),
}


def _schema_2(blob: str, serial: str) -> list[str]:
    return [
        "CREATE TABLE sync_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        f"""CREATE TABLE slots (slot_id {serial}, key_hash {blob} NOT NULL UNIQUE, created_at TEXT NOT NULL,
            account_id TEXT, kdf_salt {blob}, kdf_n INTEGER, kdf_r INTEGER, kdf_p INTEGER,
            wrapped_data_key {blob}, account_created_at TEXT, last_seq BIGINT NOT NULL DEFAULT 0)""",
        f"""CREATE TABLE records (slot_id BIGINT NOT NULL REFERENCES slots (slot_id), seq BIGINT NOT NULL,
            memory_id TEXT NOT NULL, revision INTEGER NOT NULL, ciphertext {blob} NOT NULL,
            stored_at TEXT NOT NULL, PRIMARY KEY (slot_id, seq), UNIQUE (slot_id, memory_id, revision))""",
        f"""CREATE TABLE api_keys (key_id {serial}, slot_id BIGINT NOT NULL REFERENCES slots (slot_id),
            key_hash {blob} NOT NULL UNIQUE, key_prefix TEXT, created_at TEXT NOT NULL,
            last_used_at TEXT, revoked_at TEXT)""",
        "INSERT INTO sync_meta (key, value) VALUES ('schema', '2')",
    ]


def legacy_account(database_url: str) -> tuple[str, bytes]:
    """A schema 2 database holding one account (no verifier) and its key: the API key and the data key."""
    dialect = "sqlite" if database_url.startswith("sqlite:") else "postgresql"
    if dialect == "sqlite":
        Path(urlsplit(database_url).path).parent.mkdir()
    api_key = "sqk_" + secrets.token_urlsafe(32)
    data_key = crypto.new_data_key()
    account_id = secrets.token_hex(16)
    wrapped = crypto.wrap_data_key(PASSPHRASE, CHEAP_KDF, account_id, data_key)
    digest = hashlib.sha256(api_key.encode()).digest()
    stamp = "2026-01-02T03:04:05.000006Z"
    sql = _old_database(database_url)
    for statement in _schema_2(*_SCHEMA_2[dialect]):
        sql(statement, ())
    sql(
        "INSERT INTO slots (key_hash, created_at, account_id, kdf_salt, kdf_n, kdf_r, kdf_p, "
        "wrapped_data_key, account_created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (digest, stamp, account_id, CHEAP_KDF.salt, CHEAP_KDF.n, CHEAP_KDF.r, CHEAP_KDF.p, wrapped, stamp),
    )
    sql(
        "INSERT INTO api_keys (slot_id, key_hash, key_prefix, created_at) VALUES (1, ?, ?, ?)",
        (digest, api_key[:12], stamp),
    )
    return api_key, data_key


def test_an_account_made_before_verifiers_gets_its_own_from_the_first_unlock(
    database_url: str, tmp_path: Path
) -> None:
    api_key, data_key = legacy_account(database_url)
    with start_sync_server(database_url, log=tmp_path / "sync-server.log") as server:
        assert _old_database(database_url)("SELECT value FROM sync_meta WHERE key = 'schema'", ()) == [("3",)]
        read = server.get("/v1/account", api_key).json()
        assert "keyChangeVerifier" not in read
        current, earlier = account_keys(database_url)
        assert (current["set"], current["verifier"], earlier) == ("unknown", "no verifier", [])
        # Without a verifier, no key change at all: a key holder can block changes, never make one.
        assert refused(put_key(server, random_key_change(read), api_key)) == (
            "this account has no key-change verifier yet (the first client that unlocks it sets one), "
            "so its key cannot be changed; nothing was changed"
        )

        here = {**machine(tmp_path, "here", server), "SQUIRREL_API_KEY": api_key}
        done = exported(here, PASSPHRASE)
        assert done.returncode == 0, done.stderr
        assert done.stderr == b""  # the verifier is set without a word
        verifier = hashlib.sha256(crypto.derive_key(data_key, "account-key-change")).digest()
        now = server.get("/v1/account", api_key).json()
        assert now == {**read, "keyChangeVerifier": b64(verifier)}
        refused(put_key(server, random_key_change(now, proof=b64(os.urandom(32))), api_key))
        other = {"keyChangeVerifier": b64(os.urandom(32))}
        answer = requests.put(
            server.url + "/v1/account/verifier", json=other, headers=server.headers(api_key), timeout=30
        )
        assert answer.status_code == 409

        # The passphrase changes as on any account, for every machine.
        code, _, err = change(here, PASSPHRASE, NEW)
        assert code == 0, err
        there = {**machine(tmp_path, "there", server), "SQUIRREL_API_KEY": api_key}
        assert exported(there, NEW).returncode == 0
        assert exported(there, PASSPHRASE).returncode == 1
        current, (old,) = account_keys(database_url)
        assert old["set"] == "unknown" and current["set"] == old["replaced"]


def test_a_key_holder_who_sets_a_legacy_accounts_verifier_first_is_seen_and_undone(
    database_url: str, tmp_path: Path
) -> None:
    api_key, _ = legacy_account(database_url)
    with start_sync_server(database_url, log=tmp_path / "sync-server.log") as server:
        # Before any client of this version unlocked it, a key holder sets a verifier of its own:
        # the one residual of an account made before verifiers (docs/security.md).
        theirs = os.urandom(32)
        body = {"keyChangeVerifier": b64(hashlib.sha256(theirs).digest())}
        answer = requests.put(
            server.url + "/v1/account/verifier", json=body, headers=server.headers(api_key), timeout=30
        )
        assert answer.status_code == 200
        read = answer.json()
        assert put_key(server, random_key_change(read, proof=b64(theirs)), api_key).status_code == 200
        here = {**machine(tmp_path, "here", server), "SQUIRREL_API_KEY": api_key}
        assert exported(here, PASSPHRASE).returncode == 1

        # The operator puts the key back (the earlier one is kept) ...
        _, (old,) = account_keys(database_url)
        assert sync(database_url, "restore-account-key", "1", old["id"]).returncode == 0
        done = exported(here, PASSPHRASE)
        assert done.returncode == 0, done.stderr
        # ... and the client tells the verifier is not its data key's, and refuses to change the passphrase.
        warning = done.stderr.decode().strip()
        assert "holds a key-change verifier for this account that its data key did not make" in warning
        assert "`squirrel-mcp-sync clear-verifier`" in warning
        code, _, err = change(here, PASSPHRASE, NEW)
        assert code == 1 and "until then `squirrel-mcp passphrase` is refused" in err

        # The operator replaces the leaked API key and forgets the verifier: the next unlock sets its own.
        assert sync(database_url, "revoke-key", "1").returncode == 0
        fresh = issue(database_url, "--for", "1")
        done = sync(database_url, "clear-verifier", "1")  # a revoked key still names its account
        assert done.returncode == 0 and "has no key-change verifier now" in done.stderr
        here = {**here, "SQUIRREL_API_KEY": fresh}
        done = exported(here, PASSPHRASE)
        assert done.returncode == 0 and done.stderr == b"", done.stderr
        code, _, err = change(here, PASSPHRASE, NEW)
        assert code == 0, err
        assert exported(here, NEW).returncode == 0
