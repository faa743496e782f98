"""Client-side encryption: the passphrase, the data key and one sealed record per revision.

The key hierarchy (docs/security.md says it in plain words):

    passphrase --scrypt(salt, N, r, p)--> key-encryption key (KEK)
    KEK --AES-256-GCM--> wraps a random 256-bit data key
    data key --AES-256-GCM--> each memory revision
    data key --HKDF-SHA256("squirrel-mcp/v1/<purpose>")--> a plugin's own key (`derive_key`)
    data key --HKDF-SHA256("squirrel-mcp/v1/account-key-change")--> the key-change proof
    proof --SHA-256--> the account's key-change verifier, kept by storage beside the wrapped key

Storage only ever holds the salt, the KDF parameters, the wrapped data key and
sealed records. Every AES-GCM operation carries associated data naming what the
ciphertext is (the account, and for a record its memory id and revision), so a
record copied to another id, another revision or another account fails to open
instead of being read as something it is not.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from Crypto.Cipher import AES
from Crypto.Hash import SHA256
from Crypto.Protocol.KDF import HKDF, scrypt
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

KEY_BYTES = 32
NONCE_BYTES = 12
TAG_BYTES = 16
SALT_BYTES = 16
# The first byte of every sealed blob, so the format can change without guessing.
FORMAT_VERSION = 1

# OWASP's minimum for scrypt (N=2**17, r=8, p=1): about 0.3 s and 128 MiB here,
# paid once per server start.
DEFAULT_KDF_N = 2**17
DEFAULT_KDF_R = 8
DEFAULT_KDF_P = 1
# Bounds on parameters read from storage: a vault (or a remote account) must not
# be able to make us allocate gigabytes, run for minutes, or accept a trivially
# weak KDF. Each parameter has a range, and two products are bounded as well:
# scrypt holds 128·N·r bytes at once, and its work grows with N·r·p (p runs
# sequentially in pycryptodome). The defaults use 128 MiB and N·r·p = 2^20.
KDF_N_RANGE = (2**14, 2**20)
KDF_R_RANGE = (1, 32)
KDF_P_RANGE = (1, 16)
MAX_KDF_MEMORY = 256 * 2**20  # bytes: twice the default's
MAX_KDF_WORK = 2**22  # N·r·p: four times the default's, about 1.5 s here


class DecryptionError(Exception):
    """A sealed blob did not open: wrong key, or bytes changed since sealing."""


class WrongPassphraseError(Exception):
    """The passphrase does not unwrap this account's data key."""


@dataclass(frozen=True)
class KdfParams:
    """The scrypt parameters and salt stored beside the wrapped data key."""

    salt: bytes
    n: int = DEFAULT_KDF_N
    r: int = DEFAULT_KDF_R
    p: int = DEFAULT_KDF_P

    @classmethod
    def new(cls) -> KdfParams:
        """Fresh parameters with a random salt."""
        return cls(salt=secrets.token_bytes(SALT_BYTES))

    def validate(self) -> None:
        """Refuse parameters outside the accepted bounds (they come from storage)."""
        if len(self.salt) != SALT_BYTES:
            raise ValueError("KDF salt has the wrong length")
        problem = kdf_cost_problem(self.n, self.r, self.p)
        if problem is not None:
            raise ValueError(problem)


def kdf_cost_problem(n: int, r: int, p: int) -> str | None:
    """Why scrypt parameters N, r, p are refused, or None when they are within bounds.

    Shared by the client (parameters read from a vault or a sync server) and the
    sync server (parameters a client sends), so neither side accepts what the
    other would refuse.
    """
    for name, value, (low, high) in (("N", n, KDF_N_RANGE), ("r", r, KDF_R_RANGE), ("p", p, KDF_P_RANGE)):
        if not low <= value <= high:
            return f"KDF parameter {name}={value} is outside [{low}, {high}]"
    if n & (n - 1):
        return "KDF parameter N must be a power of two"
    if 128 * n * r > MAX_KDF_MEMORY:
        return f"KDF parameters N={n}, r={r} need more than {MAX_KDF_MEMORY // 2**20} MiB (128·N·r)"
    if n * r * p > MAX_KDF_WORK:
        return f"KDF parameters N={n}, r={r}, p={p} cost more than N·r·p = 2^{MAX_KDF_WORK.bit_length() - 1}"
    return None


def derive_kek(passphrase: str, params: KdfParams) -> bytes:
    """Derive the key-encryption key from the passphrase (scrypt, memory-hard)."""
    params.validate()
    derived = scrypt(passphrase.encode("utf-8"), params.salt, KEY_BYTES, N=params.n, r=params.r, p=params.p)
    assert isinstance(derived, bytes)
    return derived


def seal(key: bytes, plaintext: bytes, associated_data: bytes) -> bytes:
    """AES-256-GCM: version byte, random 96-bit nonce, ciphertext, tag."""
    nonce = secrets.token_bytes(NONCE_BYTES)
    # AESGCM's output is the ciphertext followed by its tag, as the format has them.
    return bytes([FORMAT_VERSION]) + nonce + AESGCM(key).encrypt(nonce, plaintext, associated_data)


def open_sealed(key: bytes, blob: bytes, associated_data: bytes) -> bytes:
    """Reverse of `seal`; raises DecryptionError on any mismatch."""
    if len(blob) < 1 + NONCE_BYTES + TAG_BYTES or blob[0] != FORMAT_VERSION:
        raise DecryptionError("sealed blob is malformed")
    # Opening runs once per record at every unlock: `cryptography`'s AES-GCM (OpenSSL)
    # costs a few microseconds a record where pycryptodome's cipher set-up cost hundreds.
    try:
        return AESGCM(key).decrypt(blob[1 : 1 + NONCE_BYTES], blob[1 + NONCE_BYTES :], associated_data)
    except InvalidTag as error:
        raise DecryptionError("sealed blob failed authentication") from error


# What `seal` puts before the ciphertext (version byte, nonce), and after it (the tag).
SEALED_PREFIX = 1 + NONCE_BYTES
SEALED_OVERHEAD = SEALED_PREFIX + TAG_BYTES


def seal_in_place(key: bytes, blob: memoryview, associated_data: bytes) -> None:
    """`seal` without copying the plaintext: for large blobs (a vector file).

    `blob` holds SEALED_PREFIX bytes of room, the plaintext, TAG_BYTES of room; on
    return it holds exactly what `seal` returns for that plaintext (a fresh nonce).
    """
    nonce = secrets.token_bytes(NONCE_BYTES)
    blob[0] = FORMAT_VERSION
    blob[1:SEALED_PREFIX] = nonce
    text = blob[SEALED_PREFIX : len(blob) - TAG_BYTES]
    cipher = AES.new(key, AES.MODE_GCM, nonce=nonce)
    cipher.update(associated_data)
    cipher.encrypt(text, output=text)
    blob[len(blob) - TAG_BYTES :] = cipher.digest()


def open_in_place(key: bytes, blob: memoryview, associated_data: bytes) -> memoryview:
    """`open_sealed` without copying: decrypts inside `blob` (writable) and returns the plaintext's view.

    Raises DecryptionError on any mismatch; `blob` then holds garbage.
    """
    if len(blob) < SEALED_OVERHEAD or blob[0] != FORMAT_VERSION:
        raise DecryptionError("sealed blob is malformed")
    text = blob[SEALED_PREFIX : len(blob) - TAG_BYTES]
    cipher = AES.new(key, AES.MODE_GCM, nonce=bytes(blob[1:SEALED_PREFIX]))
    cipher.update(associated_data)
    cipher.decrypt(text, output=text)
    try:
        cipher.verify(bytes(blob[len(blob) - TAG_BYTES :]))
    except ValueError as error:
        raise DecryptionError("sealed blob failed authentication") from error
    return text


def data_key_ad(account_id: str) -> bytes:
    """Associated data for the wrapped data key."""
    return f"squirrel-mcp/v1/data-key|{account_id}".encode()


def record_ad(account_id: str, memory_id: str, revision: int) -> bytes:
    """Associated data for one memory revision: binds account, id and revision."""
    return f"squirrel-mcp/v1/record|{account_id}|{memory_id}|{revision}".encode()


def new_data_key() -> bytes:
    """A fresh random 256-bit data key."""
    return secrets.token_bytes(KEY_BYTES)


def wrap_data_key(passphrase: str, params: KdfParams, account_id: str, data_key: bytes) -> bytes:
    """Seal the data key under the passphrase's KEK."""
    return seal(derive_kek(passphrase, params), data_key, data_key_ad(account_id))


def unwrap_data_key(passphrase: str, params: KdfParams, account_id: str, wrapped: bytes) -> bytes:
    """Open the data key; a wrong passphrase raises WrongPassphraseError."""
    try:
        data_key = open_sealed(derive_kek(passphrase, params), wrapped, data_key_ad(account_id))
    except DecryptionError as error:
        raise WrongPassphraseError(
            "the passphrase does not unlock this vault (SQUIRREL_PASSPHRASE is wrong, "
            "or the vault's key record is damaged)"
        ) from error
    if len(data_key) != KEY_BYTES:
        raise WrongPassphraseError("the vault's wrapped data key has the wrong length")
    return data_key


def derive_key(data_key: bytes, purpose: str) -> bytes:
    """A 256-bit key for one `purpose`: HKDF-SHA256 of the data key under "squirrel-mcp/v1/<purpose>".

    A plugin that keeps private data on disk (vectors) encrypts it under such a key,
    so the data key itself never leaves the store. Each purpose gets an independent
    key, so one plugin's file cannot be opened with another's.
    """
    if not purpose:
        raise ValueError("a key needs a purpose label")
    derived = HKDF(data_key, KEY_BYTES, b"", SHA256, context=f"squirrel-mcp/v1/{purpose}".encode())
    assert isinstance(derived, bytes)
    return derived


# The purpose (`derive_key`) of the key that proves a key change comes from a holder of the data key.
KEY_CHANGE_PURPOSE = "account-key-change"


def key_change_proof(data_key: bytes) -> bytes:
    """What a key change sends to show it comes from a holder of the data key.

    `derive_key(data_key, "account-key-change")`: the data key does not change when
    the passphrase does, so neither does the proof. An API key gives no way to it.
    """
    return derive_key(data_key, KEY_CHANGE_PURPOSE)


def key_change_verifier(proof: bytes) -> bytes:
    """What storage keeps to check a key change's proof: its SHA-256 (the proof itself is never kept).

    The proof is 256 bits from HKDF, so a plain hash leaves nothing to guess, as for API keys.
    """
    return hashlib.sha256(proof).digest()


def proves_key_change(verifier: bytes, proof: bytes) -> bool:
    """Whether `proof` is the one `verifier` was made from (compared in constant time)."""
    return hmac.compare_digest(key_change_verifier(proof), verifier)
