"""The key hierarchy and sealed records: what opens, and what must not."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from squirrel_mcp.keys import crypto

FAST = crypto.KdfParams(salt=b"s" * crypto.SALT_BYTES, n=2**14)
KEY = b"k" * crypto.KEY_BYTES


@given(plaintext=st.binary(max_size=2000), ad=st.binary(max_size=100))
def test_seal_then_open_round_trips(plaintext: bytes, ad: bytes) -> None:
    assert crypto.open_sealed(KEY, crypto.seal(KEY, plaintext, ad), ad) == plaintext


def test_sealing_twice_gives_different_bytes() -> None:
    assert crypto.seal(KEY, b"same", b"ad") != crypto.seal(KEY, b"same", b"ad")


def test_a_record_moved_to_another_id_revision_or_account_does_not_open() -> None:
    sealed = crypto.seal(KEY, b"memory", crypto.record_ad("acct", "0123456789abcdef", 1))
    for ad in (
        crypto.record_ad("acct", "fedcba9876543210", 1),
        crypto.record_ad("acct", "0123456789abcdef", 2),
        crypto.record_ad("other", "0123456789abcdef", 1),
    ):
        with pytest.raises(crypto.DecryptionError):
            crypto.open_sealed(KEY, sealed, ad)


@given(position=st.integers(min_value=0, max_value=40), bit=st.integers(min_value=0, max_value=7))
def test_any_flipped_bit_is_detected(position: int, bit: int) -> None:
    sealed = bytearray(crypto.seal(KEY, b"a memory of some length", b"ad"))
    sealed[position % len(sealed)] ^= 1 << bit
    with pytest.raises(crypto.DecryptionError):
        crypto.open_sealed(KEY, bytes(sealed), b"ad")


def test_truncated_blobs_are_refused() -> None:
    sealed = crypto.seal(KEY, b"memory", b"ad")
    for length in (0, 1, 12, 28, len(sealed) - 1):
        with pytest.raises(crypto.DecryptionError):
            crypto.open_sealed(KEY, sealed[:length], b"ad")


def test_the_data_key_unwraps_only_with_the_passphrase() -> None:
    data_key = crypto.new_data_key()
    wrapped = crypto.wrap_data_key("right passphrase", FAST, "acct", data_key)
    assert crypto.unwrap_data_key("right passphrase", FAST, "acct", wrapped) == data_key
    with pytest.raises(crypto.WrongPassphraseError):
        crypto.unwrap_data_key("wrong passphrase", FAST, "acct", wrapped)
    with pytest.raises(crypto.WrongPassphraseError):
        crypto.unwrap_data_key("right passphrase", FAST, "another account", wrapped)


@pytest.mark.parametrize(
    "params",
    [
        crypto.KdfParams(salt=b"short", n=2**14),
        crypto.KdfParams(salt=b"s" * 16, n=2**10),
        crypto.KdfParams(salt=b"s" * 16, n=2**24),
        crypto.KdfParams(salt=b"s" * 16, n=3 * 2**14),
        crypto.KdfParams(salt=b"s" * 16, n=2**14, r=0),
        crypto.KdfParams(salt=b"s" * 16, n=2**14, p=64),
    ],
)
def test_kdf_parameters_from_storage_are_bounded(params: crypto.KdfParams) -> None:
    with pytest.raises(ValueError, match=r"salt|KDF parameter"):
        crypto.derive_kek("passphrase", params)


def test_new_parameters_are_the_strong_defaults() -> None:
    params = crypto.KdfParams.new()
    params.validate()
    assert (params.n, params.r, params.p) == (2**17, 8, 1)
    assert params.salt != crypto.KdfParams.new().salt


def test_a_derived_key_is_per_purpose_and_never_the_data_key() -> None:
    data_key = crypto.new_data_key()
    key = crypto.derive_key(data_key, "memory-vectors")
    assert len(key) == crypto.KEY_BYTES and key == crypto.derive_key(data_key, "memory-vectors")
    assert key not in (data_key, crypto.derive_key(data_key, "something-else"))
    assert key != crypto.derive_key(crypto.new_data_key(), "memory-vectors")
    with pytest.raises(ValueError, match="purpose"):
        crypto.derive_key(data_key, "")


def test_a_derived_key_is_hkdf_sha256_under_the_purpose_label() -> None:
    # A known answer: vector files written before must still open, so the derivation never changes.
    expected = "5ac8245003d2640cc8afe5716ab2a9131e5c05ef849b8336c7115a08d93fa8f4"
    assert crypto.derive_key(KEY, "memory-vectors").hex() == expected


def test_sealing_in_place_is_seal_without_the_copies() -> None:
    plaintext = b"a large vector file, say" * 10
    room = bytearray(crypto.SEALED_PREFIX) + bytearray(plaintext) + bytearray(crypto.TAG_BYTES)
    crypto.seal_in_place(KEY, memoryview(room), b"ad")
    assert plaintext not in room and len(room) == len(crypto.seal(KEY, plaintext, b"ad"))
    assert crypto.open_sealed(KEY, bytes(room), b"ad") == plaintext
    sealed = bytearray(crypto.seal(KEY, plaintext, b"ad"))
    assert bytes(crypto.open_in_place(KEY, memoryview(sealed), b"ad")) == plaintext
    for broken, ad in (
        (bytearray(crypto.seal(KEY, plaintext, b"ad")), b"other"),
        (bytearray(b"\x01" * 20), b"ad"),
    ):
        with pytest.raises(crypto.DecryptionError):
            crypto.open_in_place(KEY, memoryview(broken), ad)
