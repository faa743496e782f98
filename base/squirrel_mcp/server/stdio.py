r"""The stdio transport: one JSON-RPC message per line in, one per line out, every request answered.

It follows `mcp.server.stdio.stdio_server` of the mcp SDK 2.3.0 (file
descriptors 0 and 1 claimed the same way, UTF-8 read with errors="replace")
and differs from it in two ways.

Every line that wants an answer gets one. The SDK hands a line it cannot read
to the session as an exception, and the session logs it at debug level and
drops it: the client then waits for its time-out. That happens to any line
that is not JSON, to JSON that is not a JSON-RPC message, and to a valid JSON
line holding a lone surrogate escape (a \u escape of D800-DFFF without its
pair), which Python's JSON reader accepts but pydantic's refuses. Here each
such line gets a JSON-RPC error naming the problem (never echoing the line: it
may hold memory text), with the request's id when one can be read, and the
server goes on. A notification (no id) that cannot be read is dropped, as
JSON-RPC requires. Upstream: modelcontextprotocol/python-sdk issues #2751 and
#2848 (pull requests #2766 and #2857, closed without being merged).

Every request read before the end of input is answered. The SDK's dispatcher
cancels the calls in flight as soon as its read stream ends; a tool running in
a worker thread finishes, but its answer is then written from a cancelled
scope and lost, without an error in its place. A client that pipes its
requests and closes stdin got the answer to `initialize` and few others. Here
the session's read stream stays open after the end of input until every
request read has its answer written and flushed, for END_OF_INPUT_BOUND
seconds at most; then one line on stderr says how many went unanswered and the
process exits. A client that closes stdout is not waited for. Upstream:
modelcontextprotocol/python-sdk issue #2678 (open; its pull requests, such as
#2680, not merged in 2.3.0).

While serving, file descriptor 0 reads the null device and 1 writes to stderr,
as in the SDK: stray output from a library cannot corrupt the wire.
"""

from __future__ import annotations

import io
import json
import os
from collections import Counter
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import IO, Any, Protocol

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
    JSONRPCNotification,
    JSONRPCRequest,
    JSONRPCResponse,
    jsonrpc_message_adapter,
)
from pydantic import ValidationError

from squirrel_mcp.core.lines import log_line

# How long the requests read before the end of input may take to be answered, in seconds:
# long enough for a save through a slow sync server, short enough that a hung call
# does not keep the process (and its hold on the vault) alive.
END_OF_INPUT_BOUND = 30.0
CANCELLED = "notifications/cancelled"

# What JSON counts as whitespace (str.strip() would also take away \x1c, \x85, ...).
JSON_WHITESPACE = " \t\r\n"
NOT_JSON = "Parse error: the message is not valid JSON (or is nested too deeply)"
NOT_UNICODE = (
    "Invalid params: the message holds a lone surrogate escape (\\ud800-\\udfff without its pair), "
    "which is not valid Unicode text; nothing was done"
)
NOT_A_MESSAGE = "Invalid request: the message is not a JSON-RPC 2.0 request, notification or response"
TOO_DEEP = "Invalid request: the message nests arrays or objects too deeply to be read"


class LinesOut(Protocol):
    """Where a session's messages are written, a line each: a file (stdio) or a bridge's connection."""

    async def write(self, text: str, /) -> object:
        """Write `text` (BrokenPipeError once no one reads)."""

    async def flush(self) -> None:
        """Send what was written."""


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


def text_in(wire: IO[bytes]) -> io.TextIOWrapper:
    r"""The wire's lines as text, decoded as the transport reads them.

    Undecodable bytes become U+FFFD, as in the SDK; the models then judge the text.
    Lines end at "\n" only (the MCP stdio framing): a stray "\r" is JSON whitespace.
    """
    return io.TextIOWrapper(wire, encoding="utf-8", errors="replace", newline="\n")


def text_out(wire: IO[bytes]) -> io.TextIOWrapper:
    """The wire as text to write messages to, one a line."""
    return io.TextIOWrapper(wire, encoding="utf-8", newline="\n")


def _request_key(request_id: object) -> str:
    """The key an id is tracked by: its text, so that 7 and "7" are one id, as the SDK correlates them."""
    return str(request_id)


class Outstanding:
    """The requests read whose answers are not on the wire yet, by id.

    A request counts from the moment it is read until its answer is written and
    flushed; one the client cancels stops counting, as the SDK never answers it.
    Once the client stops reading, nothing counts any more.
    """

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()
        self._changed = anyio.Event()
        self._abandoned = False

    def __len__(self) -> int:
        return self._counts.total()

    def read(self, message: JSONRPCMessage | Refusal) -> None:
        """Note a message handed on: a request (or a refused line) awaits its answer."""
        if self._abandoned:
            return
        if isinstance(message, Refusal):
            self._counts[_request_key(message.error.id)] += 1
        elif isinstance(message, JSONRPCRequest):
            self._counts[_request_key(message.id)] += 1
        elif isinstance(message, JSONRPCNotification) and message.method == CANCELLED:
            request_id = (message.params or {}).get("requestId")
            self._forget(_request_key(request_id))

    def written(self, message: JSONRPCMessage) -> None:
        """Note a message on the wire: an answer settles its request."""
        if isinstance(message, JSONRPCResponse | JSONRPCError):
            key = _request_key(message.id)
            if self._counts[key] > 1:
                self._counts[key] -= 1
            else:
                self._forget(key)

    def abandon(self) -> None:
        """Stop waiting for any answer, now and later: none can be delivered."""
        self._abandoned = True
        self._counts.clear()
        self._changed.set()

    def _forget(self, key: str) -> None:
        self._counts.pop(key, None)
        self._changed.set()
        self._changed = anyio.Event()

    async def answered(self) -> None:
        """Return once every request read has its answer on the wire."""
        while self._counts:
            await self._changed.wait()


def give_up(unanswered: int, waited: float) -> None:
    """End the process: the requests still unanswered at the bound will not be answered.

    Cancelling would not do: a tool runs in a worker thread, which nothing can
    stop, and the event loop waits for it. Every answer given is already flushed,
    and the vault is safe against a process ending at any point.
    """
    log_line(
        f"end of input: {unanswered} request(s) still unanswered after {waited:g} s; "
        "exiting without their answers"
    )
    os._exit(1)


@asynccontextmanager
async def line_transport(
    lines_in: AsyncIterable[str],
    lines_out: LinesOut,
    *,
    bound: float = END_OF_INPUT_BOUND,
    on_overdue: Callable[[int, float], None] = give_up,
) -> AsyncIterator[
    tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]
]:
    """The (read, write) streams of an MCP session over one line each way.

    At the end of input the session's read stream stays open until every
    request read has its answer written and flushed: the SDK cancels whatever is
    in flight once its read stream ends, and a cancelled call's answer is lost.
    After `bound` seconds, `on_overdue` hears how many are still unanswered (and
    the bound); if it returns, the session's read stream ends as the SDK expects.
    """
    to_session, incoming = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    outgoing, to_wire = anyio.create_memory_object_stream[SessionMessage](0)
    replies = outgoing.clone()
    outstanding = Outstanding()

    async def read_lines() -> None:
        async with to_session, replies:
            async for line in lines_in:
                message = read_message(line)
                if message is None:
                    continue
                outstanding.read(message)
                if isinstance(message, Refusal):
                    await replies.send(SessionMessage(message.error))
                else:
                    await to_session.send(SessionMessage(message))
            with anyio.move_on_after(bound):
                await outstanding.answered()
            if outstanding:
                on_overdue(len(outstanding), bound)

    async def write_lines() -> None:
        async with to_wire:
            try:
                async for session_message in to_wire:
                    data = session_message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await lines_out.write(data + "\n")
                    await lines_out.flush()
                    outstanding.written(session_message.message)
            except BrokenPipeError:
                # The client closed its end: no answer can reach it any more, so none is
                # waited for. The session's later answers meet a closed stream, which the
                # SDK drops quietly.
                outstanding.abandon()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(read_lines)
        tasks.start_soon(write_lines)
        yield incoming, outgoing


@asynccontextmanager
async def stdio_transport(
    bound: float = END_OF_INPUT_BOUND, on_overdue: Callable[[int, float], None] = give_up
) -> AsyncIterator[
    tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]
]:
    """The (read, write) streams of an MCP session over this process's stdin and stdout."""
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        with _claim(0, "rb", null) as wire_in, _claim(1, "wb", 2) as wire_out:
            lines_in, lines_out = anyio.wrap_file(text_in(wire_in)), anyio.wrap_file(text_out(wire_out))
            async with line_transport(lines_in, lines_out, bound=bound, on_overdue=on_overdue) as streams:
                yield streams
    finally:
        os.close(null)
