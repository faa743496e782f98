"""The memory store in process: revisions, history, conflicts, import."""

from __future__ import annotations

import unicodedata
from pathlib import Path

import pytest
from pydantic import ValidationError

from squirrel_mcp.book.errors import ConflictError, UnknownMemoryError
from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.core.models import Revision
from squirrel_mcp.keys import crypto
from squirrel_mcp.storage.local import LocalVault


@pytest.fixture
def store(tmp_path: Path) -> MemoryStore:
    # A cheap KDF keeps these unit tests fast; the stdio tests use the real one.
    cheap = crypto.KdfParams(salt=b"s" * crypto.SALT_BYTES, n=2**14)
    return MemoryStore.create(LocalVault(tmp_path / "v", create=True), "passphrase", kdf=cheap)


def save(store: MemoryStore, text: str) -> Revision:
    return store.save(entity="user", text=text, category="note", tags=[], keywords=[])


def test_two_stores_on_one_vault_cannot_write_the_same_revision(store: MemoryStore, tmp_path: Path) -> None:
    other = MemoryStore.unlock(LocalVault(tmp_path / "v", create=False), "passphrase")
    saved = save(store, "first")
    # Both read revision 1; the second writer to reach storage is told, not overwritten.
    other.refresh()
    store.update(saved.id, changes={"text": "from one"}, reason=None)
    with pytest.raises(ConflictError, match="changed by another process"):
        _update_without_refresh(other, saved.id)
    assert store.get(saved.id).text == "from one"


def _update_without_refresh(store: MemoryStore, memory_id: str) -> None:
    """Simulate a race: the store has not seen the other write when it appends."""
    refresh = store.refresh
    store.refresh = lambda: None  # type: ignore[method-assign]
    try:
        store.update(memory_id, changes={"text": "from two"}, reason=None)
    finally:
        store.refresh = refresh  # type: ignore[method-assign]


def test_unknown_ids_are_reported(store: MemoryStore) -> None:
    with pytest.raises(UnknownMemoryError):
        store.get("0123456789abcdef")
    with pytest.raises(UnknownMemoryError):
        store.history("0123456789abcdef")


def test_import_adds_missing_revisions_and_reports_conflicts(store: MemoryStore) -> None:
    saved = save(store, "original")
    store.update(saved.id, changes={"text": "corrected"}, reason="typo")
    history = store.history(saved.id)
    assert store.import_history(history) == (0, 2, [])

    foreign = history[0].model_copy(update={"id": "00000000000000aa"})
    assert store.import_history([foreign]) == (1, 0, [])

    different = history[1].model_copy(update={"text": "something else"})
    assert store.import_history([history[0], different]) == (0, 1, [2])
    assert store.get(saved.id).text == "corrected"


def test_an_import_batch_refused_by_storage_is_redone_memory_by_memory(store: MemoryStore) -> None:
    # The same memory twice in one file puts one revision twice in a batch: storage
    # refuses the whole append, and each memory is then judged again on its own.
    saved = save(store, "kept as it is")
    mine = store.history(saved.id)
    foreign = mine[0].model_copy(update={"id": "00000000000000ab", "text": "imported"})
    other = mine[0].model_copy(update={"id": "00000000000000ac", "text": "imported too"})
    results = store.import_histories([[foreign], mine, [foreign], [other]])
    assert results == [(1, 0, []), (0, 1, []), (0, 1, []), (1, 0, [])]
    assert [store.get(memory_id).text for memory_id in (foreign.id, other.id)] == ["imported", "imported too"]
    assert len(store.current()) == 3


def test_the_control_characters_refused_are_unicodes_less_tab_and_newlines() -> None:
    def text_is_valid(text: str) -> bool:
        stamp = "2026-06-01T00:00:00Z"
        try:
            Revision.model_validate(
                {
                    "id": "0" * 16,
                    "entity": "user",
                    "text": f"a{text}b",
                    "tags": [],
                    "keywords": [],
                    "category": "note",
                    "createdAt": stamp,
                    "updatedAt": stamp,
                    "revision": 1,
                    "change": "created",
                }
            )
        except ValidationError:
            return False
        return True

    # Lone surrogates are refused as such; every other code point is a control character or not.
    characters = [chr(code) for code in range(0x110000) if not 0xD800 <= code <= 0xDFFF]
    controls = {char for char in characters if unicodedata.category(char) == "Cc"} - {"\t", "\n", "\r"}
    assert len(controls) == 62 and not any(text_is_valid(char) for char in controls)
    rest = "".join(char for char in characters if char not in controls)
    assert all(text_is_valid(rest[start : start + 3000]) for start in range(0, len(rest), 3000))
