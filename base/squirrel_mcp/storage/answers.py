"""What the sync API's answers mean to its client: error codes, wire models, StorageErrors.

An error body's code, a body read as a wire model, and the StorageError that
names the cause of an answer that is not the one expected.

Apart from the Storage methods (storage/remote.py), which say what each
operation expects, and from the transport (storage/transport.py), which only
gets answers back: this is the contract's side of an answer. Each refusal is
one StorageError line saying what the server did, never what it sent.
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel, ValidationError

from squirrel_mcp.storage import NO_REMOTE_ACCOUNT, StorageError, wire
from squirrel_mcp.storage.transport import Reply

_M = TypeVar("_M", bound=BaseModel)


def detail(response: Reply) -> wire.ErrorDetail | None:
    """The error the body describes, or None if it is not an error body of the contract."""
    try:
        return wire.Error.model_validate_json(response.content).error
    except ValidationError:
        return None


def code(response: Reply) -> str | None:
    """The contract's error code in the body (no_account, revision_conflict, ...), or None."""
    found = detail(response)
    return None if found is None else found.code


def expect(origin: str, response: Reply, status: int, doing: str) -> None:
    """Raise a StorageError naming the cause unless the answer has `status`."""
    got = response.status_code
    if got == status:
        return
    error_code = code(response)
    where = f"the sync server at {origin}"
    if got == 401:
        message = f"{where} did not accept SQUIRREL_API_KEY (401): check the key"
    elif got == 403:
        message = f"{where} forbids this API key to {doing} (403)"
    elif got == 404 and error_code == "no_account":
        message = f"{where} {NO_REMOTE_ACCOUNT}"
    elif got == 404:
        message = (
            f"{where} has no such endpoint (404): check that SQUIRREL_API_BASE_URL is the "
            "address of a squirrel-mcp sync server"
        )
    elif 300 <= got < 400:
        message = (
            f"{where} answered with a redirect ({got}): set SQUIRREL_API_BASE_URL to the address "
            "it redirects to"
        )
    else:
        message = f"{where} refused to {doing} (HTTP {got}{f' {error_code}' if error_code else ''})"
    raise StorageError(message)


def parse(origin: str, model: type[_M], response: Reply, what: str) -> _M:
    """The body as `model`; StorageError (unreadable) if it is not one."""
    try:
        return model.model_validate_json(response.content)
    except ValidationError:
        raise unreadable(origin, what) from None


def unreadable(origin: str, what: str) -> StorageError:
    """The error for an answer that does not keep the contract."""
    return StorageError(f"the sync server at {origin} sent {what} in a form this client cannot read")


def too_much(origin: str, what: str) -> StorageError:
    """The error for a pull past one of the client's limits."""
    return StorageError(
        f"the sync server at {origin} sent {what} in one pull, more than any real account holds; refused"
    )
