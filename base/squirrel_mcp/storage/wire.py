"""The JSON shapes of the sync API, one pydantic model each: what the client and the server exchange.

The sync server (`squirrel_mcp.syncserver`) checks every request body against
these models and builds every answer with them; the client
(`squirrel_mcp.storage.remote`) builds its requests with them and reads the
answers with them. The local vault stores its account record as a `NewAccount`
too. This module needs pydantic only, so the client imports it without the
server's dependencies. syncserver/openapi.yaml states the same schemas for
readers of the HTTP API; tests/sync/test_wire_models.py checks that the two
agree.

Requests (`NewAccount`, `AppendRequest`, ...) refuse fields the contract does
not define: the server stores exactly what it was meant to. An optional field
of a request may be left out, never sent as null. Answers ignore fields
they do not define, so a client keeps reading a later server that adds some
(but for the account's `kdf`, the same object as in a request); the server
itself sends none.

Integers are JSON integers: a string or a boolean is refused, and a float with
no fraction (3.0, an integer to JSON Schema) is taken as the integer.

Errors name where and which rule (squirrel_mcp.syncserver.validation), never the value: a
request can carry anything, and error messages end up in logs.
"""

from __future__ import annotations

import base64
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    StringConstraints,
    WithJsonSchema,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema
from pydantic_core import PydanticCustomError

from squirrel_mcp import storage
from squirrel_mcp.core.models import MAX_REVISION
from squirrel_mcp.keys.crypto import KDF_N_RANGE, KDF_P_RANGE, KDF_R_RANGE, KdfParams, kdf_cost_problem

MAX_CURSOR = 2**63 - 1
MAX_RECORDS_PER_APPEND = 500
# Bounds are on the base64 text, as the contract can state them exactly there.
# A wrapped data key is 61 bytes today (84 characters); up to 1 KiB is accepted.
WRAPPED_KEY_CHARS = (84, 1368)
# A sealed revision: format byte, nonce and tag around the plaintext (29 bytes,
# 40 characters, for an empty one); up to 48 KiB (65,536 characters), where a
# memory with every field at its maximum, in 4-byte characters, seals to about
# 32 KiB.
CIPHERTEXT_CHARS = (40, 65_536)
DEFAULT_PAGE = 500
MAX_PAGE = 1000

ErrorCode = Literal[
    "unauthorized",
    "forbidden",
    "no_account",
    "account_exists",
    "key_changed",
    "verifier_exists",
    "revision_conflict",
    "invalid_request",
    "not_found",
    "method_not_allowed",
    "payload_too_large",
    "request_timeout",
    "unsupported_media_type",
    "rate_limited",
    "unavailable",
    "internal",
]


def _integral(value: object) -> object:
    # JSON Schema counts 3.0 as an integer; strict mode below refuses bool and str.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


Integer = Annotated[int, Strict(), BeforeValidator(_integral)]
_Text = Annotated[str, Strict()]
_BASE64 = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"

AccountId = Annotated[_Text, StringConstraints(pattern=r"^[0-9a-f]{32}$")]
MemoryId = Annotated[_Text, StringConstraints(pattern=r"^[0-9a-f]{16}$")]
# Bounds inside the float conversion: outside it, the JSON schema would not state them.
Revision = Annotated[int, Strict(), Field(ge=1, le=MAX_REVISION), BeforeValidator(_integral)]
Cursor = Annotated[int, Strict(), Field(ge=0, le=MAX_CURSOR), BeforeValidator(_integral)]
Timestamp = Annotated[_Text, Field(json_schema_extra={"format": "date-time"})]
# 16 bytes in canonical base64: the last character carries 2 bits, the rest zero.
Salt = Annotated[_Text, StringConstraints(pattern=r"^[A-Za-z0-9+/]{21}[AQgw]==$")]
WrappedDataKey = Annotated[
    _Text,
    StringConstraints(min_length=WRAPPED_KEY_CHARS[0], max_length=WRAPPED_KEY_CHARS[1], pattern=_BASE64),
]
Ciphertext = Annotated[
    _Text,
    StringConstraints(min_length=CIPHERTEXT_CHARS[0], max_length=CIPHERTEXT_CHARS[1], pattern=_BASE64),
]
# 32 bytes in canonical base64: 43 characters, the last carrying 4 bits (its other 2 zero), and "=".
_KEY256 = r"^[A-Za-z0-9+/]{42}[AEIMQUYcgkosw048]=$"
Key256 = Annotated[_Text, StringConstraints(pattern=_KEY256)]
# The same where it may be absent (None); the schema states the string only, as the field is optional.
MaybeKey256 = Annotated[Key256 | None, WithJsonSchema({"type": "string", "pattern": _KEY256})]


def _given(value: object) -> object:
    # An optional field of a request is left out when it has no value: null is not a value of it.
    if value is None:
        raise PydanticCustomError("not_null", "must be left out rather than null")
    return value


# Optional in a request: absent is None, an explicit null is refused (the schema says string).
OptionalKey256 = Annotated[MaybeKey256, BeforeValidator(_given)]


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Answer(BaseModel):
    # The server sends exactly these fields; a client ignores any a later server adds.
    model_config = ConfigDict(extra="ignore", frozen=True, json_schema_extra={"additionalProperties": False})


# The KDF's bounds are stated here for the schema and checked by `kdf_cost_problem`:
# by the server before it stores an account (CheckedNewAccount), by a client before it
# runs scrypt (KdfParams.validate), which names the parameters out of bounds.
_N_VALUES = [2**k for k in range(KDF_N_RANGE[0].bit_length() - 1, KDF_N_RANGE[1].bit_length())]


class Kdf(_Request):
    """The scrypt parameters and salt that turn the passphrase into the key-encryption key."""

    alg: Literal["scrypt"]
    salt: Salt
    n: Annotated[Integer, WithJsonSchema({"type": "integer", "enum": _N_VALUES})]
    r: Annotated[Integer, Field(json_schema_extra={"minimum": KDF_R_RANGE[0], "maximum": KDF_R_RANGE[1]})]
    p: Annotated[Integer, Field(json_schema_extra={"minimum": KDF_P_RANGE[0], "maximum": KDF_P_RANGE[1]})]

    def check_cost(self) -> None:
        """PydanticCustomError (value-free but for N, r and p) unless the parameters are within bounds."""
        for name, value, (low, high) in (
            ("n", self.n, KDF_N_RANGE),
            ("r", self.r, KDF_R_RANGE),
            ("p", self.p, KDF_P_RANGE),
        ):
            if not low <= value <= high:
                raise PydanticCustomError("kdf_range", f"kdf.{name} must be from {low} to {high}")
        if self.n & (self.n - 1):
            raise PydanticCustomError("kdf_power", "kdf.n must be a power of two")
        # The same bounds on memory (128·N·r) and work (N·r·p) as every client applies,
        # so the server never stores an account its clients would refuse to unlock.
        problem = kdf_cost_problem(self.n, self.r, self.p)
        if problem is not None:
            raise PydanticCustomError("kdf_cost", problem)


class NewAccount(_Request):
    """What `squirrel-mcp init` stores: exactly the local vault's account record.

    `keyChangeVerifier` is left out only by clients from before verifiers were
    kept; such an account gets one from the first client that unlocks it.
    """

    id: AccountId
    kdf: Kdf
    wrappedDataKey: WrappedDataKey
    keyChangeVerifier: OptionalKey256 = None

    @classmethod
    def of(cls, account: storage.Account) -> NewAccount:
        """The wire form of `account`, unchecked: the receiver checks what it is sent."""
        verifier = account.key_change_verifier
        return cls.model_construct(
            id=account.account_id,
            kdf=Kdf.model_construct(
                alg="scrypt",
                salt=_b64encode(account.kdf.salt),
                n=account.kdf.n,
                r=account.kdf.r,
                p=account.kdf.p,
            ),
            wrappedDataKey=_b64encode(account.wrapped_data_key),
            keyChangeVerifier=None if verifier is None else _b64encode(verifier),
        )

    def account(self) -> storage.Account:
        """The account this describes."""
        return _account(self.id, self.kdf, self.wrappedDataKey, self.keyChangeVerifier)


class CheckedNewAccount(NewAccount):
    """A `NewAccount` whose KDF cost is also within the bounds every client accepts (the server's check)."""

    @model_validator(mode="after")
    def _cost(self) -> CheckedNewAccount:
        self.kdf.check_cost()
        return self


class Account(_Answer):
    """The stored account, with the time it was created; `keyChangeVerifier` once it has one."""

    id: AccountId
    kdf: Kdf
    wrappedDataKey: WrappedDataKey
    keyChangeVerifier: MaybeKey256 = None
    createdAt: Timestamp

    def account(self) -> storage.Account:
        """The account this describes."""
        return _account(self.id, self.kdf, self.wrappedDataKey, self.keyChangeVerifier)


class AccountKey(_Request):
    """What the passphrase unlocks: the KDF parameters and salt, and the wrapped data key."""

    kdf: Kdf
    wrappedDataKey: WrappedDataKey

    @classmethod
    def of(cls, account: storage.Account) -> AccountKey:
        """The key of `account`, unchecked."""
        new = NewAccount.of(account)
        return cls.model_construct(kdf=new.kdf, wrappedDataKey=new.wrappedDataKey)

    def key(self) -> tuple[KdfParams, bytes]:
        """The KDF parameters and the wrapped data key this describes."""
        account = _account("", self.kdf, self.wrappedDataKey)
        return account.kdf, account.wrapped_data_key


class KeyChange(_Request):
    """A new passphrase's key, to store only if the account still holds the `expected` one.

    `proof` (the data key's key-change proof) must match the account's verifier;
    the server answers a change without it 403, as one with a wrong one.
    """

    expected: AccountKey
    new: AccountKey
    proof: OptionalKey256 = None

    @classmethod
    def of(cls, expected: storage.Account, new: storage.Account, proof: bytes) -> KeyChange:
        """The wire form of replacing `expected`'s key with `new`'s, unchecked."""
        return cls.model_construct(
            expected=AccountKey.of(expected), new=AccountKey.of(new), proof=_b64encode(proof)
        )

    def proof_bytes(self) -> bytes | None:
        """The proof sent, or None (the pattern guarantees it decodes)."""
        return None if self.proof is None else _b64decode(self.proof)


class CheckedKeyChange(KeyChange):
    """A `KeyChange` whose new KDF cost is within the bounds every client accepts (the server's check)."""

    @model_validator(mode="after")
    def _cost(self) -> CheckedKeyChange:
        try:
            self.new.kdf.check_cost()
        except PydanticCustomError as error:
            # Say which of the two keys: "new.kdf.n must be ...", "new.kdf: KDF parameters ...".
            message = error.message()
            where = "new." if message.startswith("kdf.") else "new.kdf: "
            raise PydanticCustomError(error.type, where + message) from None
        return self


class NewVerifier(_Request):
    """The key-change verifier of an account made before verifiers were kept: stored if it has none."""

    keyChangeVerifier: Key256

    @classmethod
    def of(cls, verifier: bytes) -> NewVerifier:
        """The wire form of `verifier`, unchecked."""
        return cls.model_construct(keyChangeVerifier=_b64encode(verifier))

    def verifier(self) -> bytes:
        """The verifier sent (the pattern guarantees it decodes)."""
        return _b64decode(self.keyChangeVerifier)


def _account(
    account_id: str, kdf: Kdf, wrapped_data_key: str, verifier: str | None = None
) -> storage.Account:
    # The patterns of the salt, the wrapped key and the verifier guarantee that they decode.
    params = KdfParams(salt=_b64decode(kdf.salt), n=kdf.n, r=kdf.r, p=kdf.p)
    return storage.Account(
        account_id=account_id,
        kdf=params,
        wrapped_data_key=_b64decode(wrapped_data_key),
        key_change_verifier=None if verifier is None else _b64decode(verifier),
    )


class NewRecord(_Request):
    """A sealed memory revision to store."""

    memoryId: MemoryId
    revision: Revision
    ciphertext: Ciphertext


class AppendRequest(_Request):
    """The records of one append, stored all together or not at all."""

    records: Annotated[list[NewRecord], Field(max_length=MAX_RECORDS_PER_APPEND)]

    @classmethod
    def of(cls, records: list[storage.SealedRecord]) -> AppendRequest:
        """The wire form of `records`, unchecked: the server checks what it is sent."""
        return cls.model_construct(
            records=[
                NewRecord.model_construct(
                    memoryId=r.memory_id, revision=r.revision, ciphertext=_b64encode(r.ciphertext)
                )
                for r in records
            ]
        )

    def sealed(self) -> list[storage.SealedRecord]:
        """The records to store (the pattern guarantees the base64 decodes)."""
        return [storage.SealedRecord(r.memoryId, r.revision, _b64decode(r.ciphertext)) for r in self.records]


class StoredRecord(_Answer):
    """Where one appended record landed."""

    seq: Cursor
    memoryId: MemoryId
    revision: Revision
    storedAt: Timestamp


class AppendResult(_Answer):
    """One entry per appended record, in request order."""

    stored: list[StoredRecord]


class Record(_Answer):
    """A stored sealed memory revision."""

    seq: Cursor
    memoryId: MemoryId
    revision: Revision
    ciphertext: Ciphertext
    storedAt: Timestamp


class ChangesPage(_Answer):
    """Records after a cursor, the new cursor, and whether more remain."""

    records: list[Record]
    cursor: Cursor
    more: Annotated[bool, Strict()]

    def sealed(self) -> list[storage.SealedRecord]:
        """The page's records as storage holds them."""
        return [storage.SealedRecord(r.memoryId, r.revision, _b64decode(r.ciphertext)) for r in self.records]


class Health(_Answer):
    """The answer of /v1/health."""

    status: Literal["ok"]


class ErrorDetail(_Answer):
    """What went wrong: a stable code, a line for people, and for a conflict the record refused."""

    # A client reads a code it does not know (a later server's) as one more error.
    code: Annotated[
        _Text,
        StringConstraints(pattern=r"^[a-z_]{1,40}$"),
        WithJsonSchema({"type": "string", "enum": list(get_args(ErrorCode))}),
    ]
    message: _Text
    memoryId: MemoryId | SkipJsonSchema[None] = None
    revision: Revision | SkipJsonSchema[None] = None


class Error(_Answer):
    """The one shape of every error answer."""

    error: ErrorDetail


# Every schema of the contract, by its name there.
SCHEMAS: dict[str, type[BaseModel]] = {
    "Kdf": Kdf,
    "NewAccount": NewAccount,
    "Account": Account,
    "AccountKey": AccountKey,
    "KeyChange": KeyChange,
    "NewVerifier": NewVerifier,
    "NewRecord": NewRecord,
    "Record": Record,
    "AppendRequest": AppendRequest,
    "StoredRecord": StoredRecord,
    "AppendResult": AppendResult,
    "ChangesPage": ChangesPage,
    "Health": Health,
    "Error": Error,
}


def _b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _b64decode(text: str) -> bytes:
    return base64.b64decode(text, validate=True)


def json_body(model: BaseModel) -> dict[str, Any]:
    """`model` as the JSON object the contract spells (None fields left out)."""
    return model.model_dump(mode="json", exclude_none=True)
