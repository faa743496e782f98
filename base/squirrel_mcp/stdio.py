r"""The stdio transport: one JSON-RPC message per line in, one per line out, every bad line answered.

The mcp SDK's own stdio transport hands a line it cannot decode to the session,
which drops it without a word: the client then waits for its time-out. That
happens to any line that is not JSON, to JSON that is not a JSON-RPC message,
and to a valid JSON line holding a lone surrogate escape (a \u escape of
D800-DFFF without its pair), which Python's JSON reader accepts but pydantic's
refuses. Here each such line gets a JSON-RPC error naming the problem (never
echoing the line: it may hold memory text), with the request's id when one can
be read, and the server goes on.
A notification (no id) that cannot be read is dropped, as JSON-RPC requires.

While serving, file descriptor 0 reads the null device and 1 writes to stderr,
as in the SDK: stray output from a library cannot corrupt the wire.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import IO, Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage
from mcp_types import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    ErrorData,
    JSONRPCError,
    JSONRPCMessage,
    jsonrpc_message_adapter,
)
from pydantic import ValidationError

# What JSON counts as whitespace (str.strip() would also take away \x1c, \x85, ...).
JSON_WHITESPACE = " \t\r\n"
NOT_JSON = "Parse error: the message is not valid JSON (or is nested too deeply)"
NOT_UNICODE = (
    "Invalid params: the message holds a lone surrogate escape (\\ud800-\\udfff without its pair), "
    "which is not valid Unicode text; nothing was done"
)
NOT_A_MESSAGE = "Invalid request: the message is not a JSON-RPC 2.0 request, notification or response"
TOO_DEEP = "Invalid request: the message nests arrays or objects too deeply to be read"


@dataclass(frozen=True)
class Refusal:
    """A line that is no message: the error to answer it with."""

    error: JSONRPCError


def _refuse(request_id: int | str | None, code: int, message: str) -> Refusal:
    return Refusal(JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(code=code, message=message)))


def _request_id(data: object) -> int | str | None:
    """The id of a decoded message, if it has one a reply can carry (a clean string or an integer)."""
    if not isinstance(data, dict):
        return None
    value = data.get("id")
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return None
        return value
    return None


def _top_level_id(line: str) -> int | str | None:
    """The id of the JSON object on `line`, found without parsing what it nests.

    For a line Python's JSON reader gives up on (too deep, or broken after the id),
    so that the refusal still reaches the request that is waiting for it.
    """
    decoder = json.JSONDecoder()
    depth, position, expecting_key = 0, 0, False
    while position < len(line):
        char = line[position]
        if char == '"':
            try:
                text, position = decoder.raw_decode(line, position)
            except ValueError:
                return None
            if depth == 1 and expecting_key and text == "id":
                rest = line[position:].lstrip()
                if not rest.startswith(":"):
                    return None
                try:
                    value, _ = decoder.raw_decode(rest[1:].lstrip())
                except (ValueError, RecursionError):
                    return None
                return _request_id({"id": value})
            expecting_key = False
            continue
        if char in "{[":
            depth += 1
            expecting_key = depth == 1 and char == "{"
        elif char in "}]":
            depth -= 1
        elif char == "," and depth == 1:
            expecting_key = True
        position += 1
    return None


def _is_request_like(data: object) -> bool:
    """True when the sender expects an answer: it carries an id (a notification has none)."""
    return not isinstance(data, dict) or "id" in data


def read_message(line: str) -> JSONRPCMessage | Refusal | None:
    """The message on one line; or the refusal to answer it with; or None when it needs no answer."""
    try:
        return jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValidationError as error:
        # pydantic's JSON reader refused the text itself (not only its shape): a lone
        # surrogate, or more nesting than it reads, if Python's reader takes it.
        json_refused = any(e["type"] == "json_invalid" for e in error.errors(include_input=False))
    try:
        data: Any = json.loads(line)
    except (ValueError, RecursionError):
        if not line.strip(JSON_WHITESPACE):
            return None
        return _refuse(_top_level_id(line), PARSE_ERROR, NOT_JSON)
    if not _is_request_like(data):
        return None
    request_id = _request_id(data)
    if not json_refused:
        return _refuse(request_id, INVALID_REQUEST, NOT_A_MESSAGE)
    try:
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return _refuse(request_id, INVALID_PARAMS, NOT_UNICODE)
    except (ValueError, RecursionError):
        pass
    return _refuse(request_id, INVALID_REQUEST, TOO_DEEP)


@contextmanager
def _claim(fd: int, mode: str, diversion: int) -> Iterator[IO[bytes]]:
    """Serve the wire on `fd` from a private duplicate, with `fd` itself pointed at `diversion`."""
    wire = os.dup(fd)
    os.dup2(diversion, fd)
    try:
        # closefd=False: a reader thread may still block on it after the transport ends.
        yield os.fdopen(wire, mode, closefd=False)
    finally:
        os.dup2(wire, fd)


@asynccontextmanager
async def stdio_transport() -> AsyncIterator[
    tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]
]:
    """The (read, write) streams of an MCP session over this process's stdin and stdout."""
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        with _claim(0, "rb", null) as wire_in, _claim(1, "wb", 2) as wire_out:
            # Undecodable bytes become U+FFFD, as in the SDK; the models then judge the text.
            # Lines end at "\n" only (the MCP stdio framing): a stray "\r" is JSON whitespace.
            stdin = anyio.wrap_file(
                io.TextIOWrapper(wire_in, encoding="utf-8", errors="replace", newline="\n")
            )
            stdout = anyio.wrap_file(io.TextIOWrapper(wire_out, encoding="utf-8", newline="\n"))
            to_session, incoming = anyio.create_memory_object_stream[SessionMessage | Exception](0)
            outgoing, to_wire = anyio.create_memory_object_stream[SessionMessage](0)
            replies = outgoing.clone()

            async def read_lines() -> None:
                async with to_session, replies:
                    async for line in stdin:
                        message = read_message(line)
                        if isinstance(message, Refusal):
                            await replies.send(SessionMessage(message.error))
                        elif message is not None:
                            await to_session.send(SessionMessage(message))

            async def write_lines() -> None:
                async with to_wire:
                    async for session_message in to_wire:
                        data = session_message.message.model_dump_json(by_alias=True, exclude_unset=True)
                        await stdout.write(data + "\n")
                        await stdout.flush()

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(read_lines)
                tasks.start_soon(write_lines)
                yield incoming, outgoing
    finally:
        os.close(null)
