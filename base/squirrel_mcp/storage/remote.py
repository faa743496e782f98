"""The remote backend: a client of the sync API (syncserver/openapi.yaml), holding ciphertext only.

Used when SQUIRREL_API_BASE_URL is set. Each Storage method is one operation of
the contract, authenticated with the API key as a bearer token:

    load_account     GET  /v1/account      (404 no_account: None)
    create_account   POST /v1/account
    replace_key      PUT  /v1/account/key  (409 key_changed: KeyChanged; 403: KeyChangeForbidden)
    set_key_change_verifier
                     PUT  /v1/account/verifier  (409 verifier_exists: the account holds another)
    append           POST /v1/records      (409 revision_conflict: RevisionConflict)
    changes_since    GET  /v1/records?after=CURSOR, page after page

What crosses the wire is what the local vault stores: the account's id, KDF
salt and parameters, the wrapped data key and sealed records. Memory text is
sealed by `squirrel_mcp.book.memories` before it reaches this module.

This module holds the Storage methods: what each asks, and what it makes of
the answer. Getting an answer (retries, the deadline, size caps) is
storage/transport.py's; what an unexpected answer means, storage/answers.py's.
A page of changes is read within MAX_PAGE_BYTES, derived from the contract's
limits, and one pull follows at most MAX_PULL_PAGES pages, MAX_PULL_RECORDS
records and MAX_PULL_CIPHERTEXT bytes of ciphertext, so a server answering
`more: true` forever is stopped.

Retrying an append is safe: a (memory id, revision) pair is stored at most once,
so a retry of an append that did land gets 409; the client then looks at what
the server holds and, if it is byte for byte what it sent (each seal has a
fresh random nonce, so nobody else's record can be identical), counts the
append as done.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import requests

from squirrel_mcp.storage import (
    Account,
    AccountExists,
    KeyChanged,
    KeyChangeForbidden,
    RevisionConflict,
    SealedRecord,
    answers,
    wire,
)
from squirrel_mcp.storage.transport import TIMEOUT, Transport

# A read within this many seconds of the last pull uses the decrypted view as it
# is (MemoryStore.refresh). An agent's calls are seconds apart, so in practice
# every call pulls; this only spares a burst of reads (get_context then
# search_memory, a plugin's warm-up) one round trip each. A write always pulls.
PULL_INTERVAL = 2.0

# The contract's limits (storage/wire.py).
MAX_APPEND = wire.MAX_RECORDS_PER_APPEND
PAGE_LIMIT = wire.DEFAULT_PAGE
# A page of changes ends after about this much ciphertext (or after its first record).
PAGE_CIPHERTEXT_BYTES = 4 * 2**20


def _base64_length(size: int) -> int:
    return 4 * ((size + 2) // 3)


# What a record's fields other than its ciphertext (seq, memoryId, revision,
# storedAt and their keys, about 120 bytes) may take, generously.
RECORD_FIELDS_BYTES = 256
# The largest page a server keeping the contract sends: the page's ciphertext in
# base64, plus the one record that may cross the line, and every record's other
# fields; doubled, because the contract says "about" and a JSON encoder may
# escape each "/" of base64 as "\/". About 11 MiB.
MAX_PAGE_BYTES = 2 * (
    _base64_length(PAGE_CIPHERTEXT_BYTES) + wire.CIPHERTEXT_CHARS[1] + PAGE_LIMIT * RECORD_FIELDS_BYTES
)
# One pull. A person's memory of thousands of memories, a few revisions each, is a
# large account; these are far beyond it, and stop a server that answers
# `more: true` forever before it fills this process's memory.
MAX_PULL_PAGES = 1_000
MAX_PULL_RECORDS = 250_000
MAX_PULL_CIPHERTEXT = 512 * 2**20


class RemoteStorage:
    """The sync API backend of `squirrel_mcp.storage.Storage`."""

    pull_interval = PULL_INTERVAL

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: tuple[float, float] = TIMEOUT,
        sleep: Callable[[float], None] = time.sleep,
        session: requests.Session | None = None,
    ) -> None:
        """A client of the server at `base_url`: https, or http to loopback (else ConfigError).

        `sleep` and `session` are for tests: a recorder of the waits, a session
        with a recording transport (a WatchedAdapter, else TypeError: the
        deadline needs its connections).
        """
        self._http = Transport(base_url, api_key, timeout=timeout, sleep=sleep, session=session)
        # How errors name the server: scheme, host and port only.
        self.origin = self._http.origin
        # Pulls may run on several of the server's worker threads at once.
        self._lock = threading.Lock()
        # The highest cursor a pull has returned: where to look when checking a retried append.
        self._seen = 0

    # The Storage methods -------------------------------------------------------

    def load_account(self) -> Account | None:
        """The account of this API key, or None when its slot has none yet."""
        response, _ = self._http.call("GET", "/v1/account", what="the account")
        if response.status_code == 404 and answers.code(response) == "no_account":
            return None
        answers.expect(self.origin, response, 200, "read the account")
        return answers.parse(self.origin, wire.Account, response, "the account").account()

    def create_account(self, account: Account) -> None:
        """Store the account in this API key's slot; StorageError if the slot holds one."""
        body = wire.json_body(wire.NewAccount.of(account))
        response, attempts = self._http.call(
            "POST", "/v1/account", body, what="the answer to creating the account"
        )
        if response.status_code == 409 and answers.code(response) == "account_exists":
            # A retried create that did land the first time holds exactly our wrapped key.
            if attempts > 1 and self.load_account() == account:
                return
            raise AccountExists(f"the sync server at {self.origin} already holds an account for this API key")
        answers.expect(self.origin, response, 201, "create the account")

    def replace_key(self, expected: Account, new: Account, proof: bytes) -> None:
        """Store `new`'s key if the server still holds `expected`'s and `proof` matches its verifier.

        KeyChanged if the key is not `expected`'s, KeyChangeForbidden if the server
        refuses the proof: nothing changed either way.
        """
        if new.account_id != expected.account_id:
            raise ValueError("a key change cannot change the account id")
        body = wire.json_body(wire.KeyChange.of(expected, new, proof))
        response, attempts = self._http.call(
            "PUT", "/v1/account/key", body, what="the answer to changing the account's key"
        )
        if response.status_code == 403 and answers.code(response) == "forbidden":
            raise KeyChangeForbidden(
                f"the sync server at {self.origin} refused the key change (403): the proof of this "
                "account's data key does not match the key-change verifier it holds; nothing was changed"
            )
        if response.status_code == 409 and answers.code(response) == "key_changed":
            # A retried change that did land the first time left exactly our new key.
            if attempts > 1 and self.load_account() == new:
                return
            raise KeyChanged(
                f"the sync server at {self.origin} holds another key for this account than the one read: "
                "another machine changed the passphrase meanwhile; nothing was changed"
            )
        answers.expect(self.origin, response, 200, "change the account's key")

    def set_key_change_verifier(self, verifier: bytes) -> bytes | None:
        """Give the account `verifier` if it has none; the one it holds afterwards (None: an older server).

        A server from before verifiers has no such endpoint (404 not_found): it
        keeps none, so there is none to set.
        """
        body = wire.json_body(wire.NewVerifier.of(verifier))
        response, _ = self._http.call(
            "PUT", "/v1/account/verifier", body, what="the answer to setting the key-change verifier"
        )
        if response.status_code == 404 and answers.code(response) == "not_found":
            return None
        if response.status_code == 409 and answers.code(response) == "verifier_exists":
            account = self.load_account()
        else:
            answers.expect(self.origin, response, 200, "set the account's key-change verifier")
            account = answers.parse(self.origin, wire.Account, response, "the account").account()
        # A server that keeps verifiers names the one it holds after either answer.
        held = None if account is None else account.key_change_verifier
        if held is None:
            raise answers.unreadable(self.origin, "the account's key-change verifier")
        return held

    def append(self, records: list[SealedRecord]) -> None:
        """Store the records, all or none; RevisionConflict if a (memory id, revision) is taken.

        The contract takes at most MAX_APPEND records per request, so a longer list
        (an import of one memory with a longer history) goes in order, in several
        requests; a conflict then stops it after the batches already stored, which
        still leaves every memory's history without a gap.
        """
        for start in range(0, len(records), MAX_APPEND):
            self._append_batch(records[start : start + MAX_APPEND])

    def changes_since(self, cursor: int) -> tuple[list[SealedRecord], int]:
        """Records stored after `cursor`, following pages until the server has no more.

        StorageError past MAX_PULL_PAGES pages, MAX_PULL_RECORDS records or
        MAX_PULL_CIPHERTEXT bytes: no real account reaches them in one pull.
        """
        records: list[SealedRecord] = []
        ciphertext = 0
        pages = 0
        while True:
            pages += 1
            if pages > MAX_PULL_PAGES:
                raise answers.too_much(self.origin, f"more than {MAX_PULL_PAGES:,} pages of changes")
            response, _ = self._http.call(
                "GET",
                "/v1/records",
                params={"after": cursor, "limit": PAGE_LIMIT},
                what="a page of changes",
                limit=MAX_PAGE_BYTES,
            )
            answers.expect(self.origin, response, 200, "read the changes")
            page = answers.parse(self.origin, wire.ChangesPage, response, "the changes")
            seqs = [record.seq for record in page.records]
            # A page must move forward, or a buggy server would keep us looping.
            if (
                seqs != sorted(set(seqs))
                or any(seq <= cursor for seq in seqs)
                or page.cursor < max([cursor, *seqs])
                or len(seqs) > PAGE_LIMIT
            ):
                raise answers.unreadable(self.origin, "the changes")
            if page.more and not page.records:
                raise answers.unreadable(self.origin, "the changes")
            fresh = page.sealed()
            records.extend(fresh)
            ciphertext += sum(len(record.ciphertext) for record in fresh)
            if len(records) > MAX_PULL_RECORDS:
                raise answers.too_much(self.origin, f"more than {MAX_PULL_RECORDS:,} records")
            if ciphertext > MAX_PULL_CIPHERTEXT:
                raise answers.too_much(
                    self.origin, f"more than {MAX_PULL_CIPHERTEXT // 2**20} MiB of ciphertext"
                )
            cursor = page.cursor
            if not page.more:
                break
        with self._lock:
            self._seen = max(self._seen, cursor)
        return records, cursor

    def close(self) -> None:
        """Close the HTTP connections."""
        self._http.close()

    # Appending -------------------------------------------------------------------

    def _append_batch(self, records: list[SealedRecord]) -> None:
        if not records:
            return
        body = wire.json_body(wire.AppendRequest.of(records))
        response, attempts = self._http.call("POST", "/v1/records", body, what="the answer to an append")
        if response.status_code == 409 and answers.code(response) == "revision_conflict":
            # An earlier attempt may have landed before its answer was lost.
            if attempts > 1 and self._holds(records):
                return
            detail = answers.detail(response)
            if detail is not None and detail.memoryId is not None and detail.revision is not None:
                raise RevisionConflict(detail.memoryId, detail.revision)
            raise RevisionConflict(records[0].memory_id, records[0].revision)
        answers.expect(self.origin, response, 201, "store the records")

    def _holds(self, records: list[SealedRecord]) -> bool:
        """True when the server holds every one of `records`, byte for byte."""
        with self._lock:
            since = self._seen
        stored, _ = self.changes_since(since)
        held = {(r.memory_id, r.revision): r.ciphertext for r in stored}
        return all(held.get((r.memory_id, r.revision)) == r.ciphertext for r in records)
