"""The stdio transport's line reading and its end of input, on in-memory streams (no server process).

Bytes go in through the same text decoding the transport gives stdin; a stand-in
session answers what reaches it, as the SDK's dispatcher would. What comes out
is read back from the bytes written.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any, cast

import anyio
import pytest
from anyio.streams.memory import MemoryObjectSendStream
from mcp.shared.message import SessionMessage
from mcp_types import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    JSONRPCMessage,
    JSONRPCNotification,
    JSONRPCRequest,
    JSONRPCResponse,
)

from squirrel_mcp.server.stdio import line_transport, text_in, text_out

pytestmark = pytest.mark.anyio

SECRET = "the memory text a refusal must never repeat"
# A line no JSON reader takes, carrying an id that can still be read.
TRUNCATED = (
    '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"save_memory","arguments":{"text":"'
)


def request(request_id: int | str, method: str = "tools/call", **params: Any) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})


Answer = Callable[[JSONRPCRequest, MemoryObjectSendStream[SessionMessage]], Awaitable[None]]


async def answer_now(message: JSONRPCRequest, write: MemoryObjectSendStream[SessionMessage]) -> None:
    await write.send(
        SessionMessage(JSONRPCResponse(jsonrpc="2.0", id=message.id, result={"echo": message.method}))
    )


@dataclass
class Exchange:
    """What one run of the transport did."""

    received: list[JSONRPCMessage | Exception] = field(default_factory=list)
    written: list[dict[str, Any]] = field(default_factory=list)
    overdue: list[tuple[int, float]] = field(default_factory=list)

    def answers(self) -> dict[Any, dict[str, Any]]:
        return {message["id"]: message for message in self.written}

    def requests(self) -> list[JSONRPCRequest]:
        return [message for message in self.received if isinstance(message, JSONRPCRequest)]


async def lines_of(data: bytes, at_end: anyio.Event) -> AsyncIterator[str]:
    """The lines of `data` as the transport decodes stdin; `at_end` is set at the end of input."""
    async for line in anyio.wrap_file(text_in(io.BytesIO(data))):
        yield line
    at_end.set()


async def run(
    data: bytes,
    answer: Answer = answer_now,
    *,
    bound: float = 30.0,
    in_background: bool = False,
    at_end: anyio.Event | None = None,
) -> Exchange:
    """Feed `data` to the transport; a session answers each request with `answer`.

    `in_background` answers from a task of its own per request, as the SDK does,
    so that an answer may come after the end of input.
    """
    result = Exchange()
    out = io.BytesIO()
    lines_in = lines_of(data, at_end or anyio.Event())
    lines_out = anyio.wrap_file(text_out(out))

    def overdue(unanswered: int, waited: float) -> None:
        result.overdue.append((unanswered, waited))

    transport = line_transport(lines_in, lines_out, bound=bound, on_overdue=overdue)
    async with transport as (read, write), write, anyio.create_task_group() as handlers:
        async for item in read:
            message = item if isinstance(item, Exception) else item.message
            result.received.append(message)
            if isinstance(message, JSONRPCRequest):
                if in_background:
                    handlers.start_soon(answer, message, write)
                else:
                    await answer(message, write)
        # The session's read stream ended: like the SDK, cancel what is still running.
        handlers.cancel_scope.cancel()
    result.written = [json.loads(line) for line in out.getvalue().decode("utf-8").splitlines()]
    return result


def error_of(exchange: Exchange, request_id: object) -> dict[str, Any]:
    answer = exchange.answers()[request_id]
    assert "error" in answer, answer
    assert SECRET not in json.dumps(answer)
    return dict(answer["error"])


# Line reading --------------------------------------------------------------------------


async def test_a_valid_line_reaches_the_session_and_its_answer_the_wire() -> None:
    exchange = await run(f"{request(1, name='save_memory')}\n".encode())
    assert [m.id for m in exchange.requests()] == [1]
    assert exchange.requests()[0].params == {"name": "save_memory"}
    assert exchange.written == [{"jsonrpc": "2.0", "id": 1, "result": {"echo": "tools/call"}}]


async def test_undecodable_bytes_alone_are_a_parse_error_without_id() -> None:
    exchange = await run(b"\xff\xfe\x80\n" + f"{request(2)}\n".encode())
    assert error_of(exchange, None)["code"] == PARSE_ERROR
    # The server goes on: the next line is served.
    assert [m.id for m in exchange.requests()] == [2]
    assert exchange.received == exchange.requests()


async def test_undecodable_bytes_inside_a_string_become_replacement_characters() -> None:
    line = request(4, name="save_memory", arguments={"text": "caf"}).replace('"caf"', '"caf\udcff"')
    data = line.encode("utf-8", errors="surrogateescape") + b"\n"
    assert b"caf\xff" in data
    exchange = await run(data)
    (received,) = exchange.requests()
    assert received.params == {"name": "save_memory", "arguments": {"text": "caf\ufffd"}}
    assert 4 in exchange.answers()


@pytest.mark.parametrize(
    ("line", "request_id", "code"),
    [
        (TRUNCATED + SECRET, 3, PARSE_ERROR),
        ("not json at all: " + SECRET, None, PARSE_ERROR),
        ('{"id": 5, "method": "tools/list"}', 5, INVALID_REQUEST),  # no "jsonrpc"
        ('{"jsonrpc": "2.0", "id": "six", "method": 6}', "six", INVALID_REQUEST),
        ("[1, 2, 3]", None, INVALID_REQUEST),
        (
            '{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "\\ud800"}}',
            7,
            INVALID_PARAMS,
        ),
        (
            '{"jsonrpc": "2.0", "id": 8, "method": "ping", "params": ' + "[" * 100_000 + "]" * 100_000 + "}",
            8,
            None,
        ),
    ],
    ids=["truncated", "not-json", "no-jsonrpc", "bad-method", "batch", "lone-surrogate", "too-deep"],
)
async def test_a_line_that_is_no_message_is_refused_with_its_id(
    line: str, request_id: int | str | None, code: int | None
) -> None:
    exchange = await run(f"{line}\n{request(99, 'ping')}\n".encode())
    error = error_of(exchange, request_id)
    if code is not None:
        assert error["code"] == code
    else:
        assert error["code"] in (PARSE_ERROR, INVALID_REQUEST)
    assert [m.id for m in exchange.requests()] == [99]
    assert len(exchange.written) == 2


async def test_a_notification_that_is_no_message_is_dropped() -> None:
    exchange = await run(
        b'{"jsonrpc": "2.0", "method": 5}\n{"method": "notifications/x"}\n' + request(1).encode()
    )
    assert [m["id"] for m in exchange.written] == [1]
    assert [m.id for m in exchange.requests()] == [1]


async def test_an_id_no_answer_could_carry_makes_a_notification() -> None:
    # The SDK's models read an id that is neither an integer nor a string as absent.
    exchange = await run(b'{"jsonrpc": "2.0", "id": true, "method": "ping"}\n' + request(1).encode())
    assert isinstance(exchange.received[0], JSONRPCNotification)
    assert [m["id"] for m in exchange.written] == [1]


async def test_blank_lines_are_skipped() -> None:
    exchange = await run(b"\n   \n\t\n\r\n" + request(1).encode() + b"\n\n")
    assert exchange.received == exchange.requests()
    assert [m["id"] for m in exchange.written] == [1]


async def test_crlf_ends_a_line_and_a_lone_cr_does_not() -> None:
    # "\r" is JSON whitespace: it may end a line before "\n" or sit inside one.
    inner = request(2).replace(',"id"', ',\r"id"')
    exchange = await run(f"{request(1)}\r\n{inner}\r\n".encode())
    assert [m.id for m in exchange.requests()] == [1, 2]
    assert [m["id"] for m in exchange.written] == [1, 2]


async def test_a_very_long_line_is_read_whole() -> None:
    # The transport sets no length limit of its own: a line is read up to its "\n".
    text = "x" * (8 * 2**20)
    exchange = await run(f"{request(1, name='save_memory', arguments={'text': text})}\n".encode())
    (received,) = exchange.requests()
    assert received.params is not None
    assert received.params["arguments"]["text"] == text


async def test_a_last_line_without_newline_is_read() -> None:
    exchange = await run(f"{request(1)}\n{request(2)}".encode())
    assert [m.id for m in exchange.requests()] == [1, 2]
    assert [m["id"] for m in exchange.written] == [1, 2]


async def test_input_ending_mid_line_is_refused_with_its_id() -> None:
    exchange = await run(f"{request(1)}\n{TRUNCATED}{SECRET}".encode())
    assert [m.id for m in exchange.requests()] == [1]
    assert error_of(exchange, 3)["code"] == PARSE_ERROR


async def test_notifications_and_responses_reach_the_session_unanswered() -> None:
    data = (
        b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n'
        b'{"jsonrpc": "2.0", "id": 40, "result": {}}\n'
    )
    exchange = await run(data)
    assert isinstance(exchange.received[0], JSONRPCNotification)
    assert isinstance(exchange.received[1], JSONRPCResponse)
    assert exchange.written == []


# End of input ---------------------------------------------------------------------------


async def test_answers_given_after_the_end_of_input_are_written_before_the_transport_ends() -> None:
    at_end = anyio.Event()

    async def after_the_end(message: JSONRPCRequest, write: MemoryObjectSendStream[SessionMessage]) -> None:
        await at_end.wait()
        await answer_now(message, write)

    data = "".join(f"{request(i)}\n" for i in range(1, 31)).encode()
    exchange = await run(data, after_the_end, in_background=True, at_end=at_end)
    assert sorted(m["id"] for m in exchange.written) == list(range(1, 31))
    assert exchange.overdue == []


async def test_refusals_and_answers_alike_are_waited_for() -> None:
    at_end = anyio.Event()

    async def after_the_end(message: JSONRPCRequest, write: MemoryObjectSendStream[SessionMessage]) -> None:
        await at_end.wait()
        await answer_now(message, write)

    data = f"{request(1)}\n{TRUNCATED}\n{request(3)}\n{request(1)}\n".encode()
    exchange = await run(data, after_the_end, in_background=True, at_end=at_end)
    # Request 3's id also names the refused line: both get their answer.
    assert sorted(m["id"] for m in exchange.written) == [1, 1, 3, 3]
    assert exchange.overdue == []


async def test_a_request_the_client_cancels_is_not_waited_for() -> None:
    async def never(message: JSONRPCRequest, write: MemoryObjectSendStream[SessionMessage]) -> None:
        await anyio.sleep_forever()

    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "1"}}
    data = f"{request(1)}\n{json.dumps(cancel)}\n".encode()
    exchange = await run(data, never, in_background=True)
    assert exchange.written == []
    assert exchange.overdue == []


async def test_after_the_bound_the_unanswered_are_counted_and_the_session_ends() -> None:
    async def only_odd(message: JSONRPCRequest, write: MemoryObjectSendStream[SessionMessage]) -> None:
        if isinstance(message.id, int) and message.id % 2:
            await answer_now(message, write)
        else:
            await anyio.sleep_forever()

    data = "".join(f"{request(i)}\n" for i in range(1, 6)).encode()
    exchange = await run(data, only_odd, bound=0.05, in_background=True)
    assert sorted(m["id"] for m in exchange.written) == [1, 3, 5]
    assert exchange.overdue == [(2, 0.05)]


class ClosedPipe:
    """A wire whose reader has gone: every write fails as stdout's would."""

    async def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    async def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


async def test_a_client_that_stops_reading_is_not_waited_for() -> None:
    overdue: list[tuple[int, float]] = []
    lines_in = lines_of("".join(f"{request(i)}\n" for i in range(1, 6)).encode(), anyio.Event())
    lines_out = cast(anyio.AsyncFile[str], ClosedPipe())
    transport = line_transport(lines_in, lines_out, on_overdue=lambda *late: overdue.append(late))
    async with transport as (read, write), write:
        async for item in read:
            assert not isinstance(item, Exception)
            if isinstance(item.message, JSONRPCRequest):
                # As the SDK does, a closed stream costs the answer, not the session.
                with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                    await answer_now(item.message, write)
    assert overdue == []


def test_giving_up_ends_the_process_with_one_line_on_stderr() -> None:
    code = "from squirrel_mcp.server.stdio import give_up; give_up(3, 30.0); print('still here')"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "squirrel-mcp: end of input: 3 request(s) still unanswered after 30 s; exiting without their answers"
    ]
