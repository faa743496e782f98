"""What the memory book refuses, as exceptions: the tools turn each into the agent's error message.

`MemoryOperationError` and its subclasses are refusals of one operation (an unknown
id, a stale revision, a write while the log is not accepted); `Unchanged` is the
one that is no failure: the memory already is as asked, so nothing was written (the
tools answer it as a success). `NoAccountError` means there is nothing to unlock.
"""

from __future__ import annotations

from squirrel_mcp.core.models import Revision


class MemoryOperationError(Exception):
    """An operation the agent asked for cannot be done; the message says why."""


class NoAccountError(Exception):
    """The storage holds no account yet."""


class UnknownMemoryError(MemoryOperationError):
    """No memory has this id."""

    def __init__(self, memory_id: str) -> None:
        super().__init__(f"no memory has the id {memory_id!r}")


class UnreadableMemoryError(MemoryOperationError):
    """A record of this memory failed to decrypt (damaged or tampered with)."""

    def __init__(self, memory_id: str) -> None:
        super().__init__(f"memory {memory_id} is unreadable: its stored record failed its integrity check")


class ConflictError(MemoryOperationError):
    """Someone else changed the memory since the caller read it."""


class LogDivergedError(MemoryOperationError):
    """The log no longer extends what this machine saw of it: nothing is written until the user accepts it."""


class Unchanged(MemoryOperationError):
    """The memory already is what the operation would make it (deleted, live, those fields): nothing written.

    `revision` is the memory as it is. The page shows the message as it shows any
    refusal; the tools answer the memory as it is, with a note.
    """

    def __init__(self, message: str, revision: Revision) -> None:
        super().__init__(message)
        self.revision = revision
