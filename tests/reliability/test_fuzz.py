"""Bad input: thousands of hostile tool calls through the real server over stdio.

Two batches, one server process each (starting one costs about a second):

- through the mcp client, hypothesis draws arguments for every tool: wrong types,
  huge strings, control characters, unknown and malformed ids, negative or huge
  limits, unknown fields, mixed with valid values so that some calls succeed;
- through a raw JSON-RPC driver on the server's pipes, what the mcp client cannot
  send: lone surrogate escapes, nesting thousands deep, `arguments` of the wrong
  type, lines that are not JSON at all.

For every call: the server answers (a crash or a hang fails the check), a refusal is
a tool error or a JSON-RPC error with a message from a known, clear set that echoes
no value sent, and a refused call leaves the vault's records as they were. At the end
the seeded memories read back unchanged and a plain call still works.
"""

from __future__ import annotations

import json
import os
import queue
import re
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio.from_thread
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client

import squirrel_mcp
import squirrel_mcp_embeddings
from squirrel_mcp.core.models import HALF_LIFE_DAYS
from tests.conftest import secrets_of_this_test, server_params
from tests.reliability.figures import record
from tests.test_server import TOOLS as SERVER_TOOLS

# Draws per batch; with the fixed cases below the two batches make well over 2,000 calls.
CLIENT_EXAMPLES = 1400
RAW_EXAMPLES = 1000
# A bound on each batch's wall time as well: hypothesis stops drawing after it. A quiet
# machine makes every draw in well under a minute; the bound leaves room for one that runs
# the other tests beside this one (`nox -s tests` runs four at a time), so the minimum
# counts asserted below still hold there.
BATCH_SECONDS = 300.0
ANSWER_TIMEOUT = 20.0
# An error message longer than this must be echoing something.
MAX_MESSAGE = 1500
# Strings shorter than this may be words of a legitimate message ("limit", "tags").
ECHO_MIN = 10
# What the server can say in its own words: its source. Hypothesis also draws string
# constants it finds in local code, so a drawn value may be "search_memory" or
# "invalid arguments for"; an error holding such a value names the tool or says the rule,
# it does not repeat what the client sent.
SERVER_SOURCE = "\n".join(
    path.read_text(encoding="utf-8")
    for package in (squirrel_mcp, squirrel_mcp_embeddings)
    for path in sorted(Path(package.__file__).parent.rglob("*.py"))
)

# The server's eight tools (test_server.py checks the set), in a fixed order for hypothesis.
TOOLS = sorted(SERVER_TOOLS)
# Every refusal a tool may give, as its message starts. Anything else is a finding.
CLEAR_TOOL_ERRORS = re.compile(
    r"^(Error executing tool [a-z_]+: )?"
    r"(invalid arguments for [a-z_]+: [^\n]+"
    r"|no memory has the id '[0-9a-f]{16}'"
    r"|nothing to change: give at least one of .+"
    r"|unknown tool; this server's tools are [a-z_, ]+"
    r"|memory [0-9a-f]{16} (is deleted; restore_memory it first|is already deleted|is not deleted"
    r"|is at revision \d+, not \d+.+))$"
)
CLEAR_RPC_ERRORS = re.compile(r"^(Parse error|Invalid request|Invalid params|Method not found)")

# --- what hypothesis draws -------------------------------------------------------------

CONTROL = st.characters(codec=None, categories=["Cc"])
SURROGATE = st.characters(categories=["Cs"])


def nasty_text() -> st.SearchStrategy[str]:
    """Strings a careless or hostile client might send (lone surrogates go raw: the mcp client cannot)."""
    return st.one_of(
        st.text(max_size=60),
        st.text(alphabet=st.one_of(CONTROL, st.characters(codec="utf-8")), min_size=1, max_size=40),
        st.just(""),
        st.text(alphabet=" \t\n\r\u00a0\u2028", min_size=1, max_size=10),
        # Huge: over every field's bound, up to 200 k characters.
        st.builds(
            lambda char, n: char * n,
            st.sampled_from(["a", "é", "字", "🐿", "\x00", " ", "\u202e"]),
            st.integers(min_value=1000, max_value=200_000),
        ),
    )


def junk() -> st.SearchStrategy[Any]:
    """A JSON value of some wrong kind."""
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        st.lists(st.integers(), max_size=4),
        st.dictionaries(st.text(max_size=6), st.integers(), max_size=3),
        st.text(max_size=8),
    )


def field(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A field's value: valid often enough to reach the tool, wrong often enough to test refusals."""
    return st.one_of(valid, nasty_text(), junk())


def tool_arguments(ids: list[str]) -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
    """A tool name and arguments for it."""
    text = st.sampled_from(["Likes green tea", "Works on the garden shed", "Sister Anna in Zürich"])
    string_list = st.lists(st.one_of(st.sampled_from(["food", "family"]), nasty_text()), max_size=40)
    memory_id = st.one_of(
        st.sampled_from(ids),
        st.text(alphabet="0123456789abcdef", min_size=16, max_size=16),
        st.text(alphabet="0123456789abcdefABCDEF-", max_size=40),
    )
    integer = st.one_of(
        st.integers(min_value=-5, max_value=120),
        st.integers(min_value=-(2**63), max_value=2**63),
        st.floats(allow_nan=False, allow_infinity=False),
    )
    category = st.sampled_from(["profile", "preference", "fact", "note", "task", "PROFILE", "secret"])
    fields: dict[str, st.SearchStrategy[Any]] = {
        "text": field(text),
        "entity": field(st.sampled_from(["user", "Anna (sister)"])),
        "query": field(st.sampled_from(["tea", "garden shed", "Anna"])),
        "reason": field(st.just("it changed")),
        "category": field(category),
        "tags": field(string_list),
        "keywords": field(string_list),
        "id": field(memory_id),
        "limit": field(integer),
        "offset": field(integer),
        "recent": field(integer),
        "expectedRevision": field(integer),
        "history": field(st.booleans()),
        "nearMisses": field(st.booleans()),
        "includeDeleted": field(st.booleans()),
        "unknownField": junk(),
    }
    return st.tuples(
        st.sampled_from(TOOLS),
        st.dictionaries(st.sampled_from(sorted(fields)), st.none(), max_size=6),
    ).flatmap(
        lambda drawn: st.tuples(
            st.just(drawn[0]),
            st.fixed_dictionaries({name: fields[name] for name in drawn[1]}),
        )
    )


# --- the checks on every answer ----------------------------------------------------------


def strings_in(value: Any) -> Iterator[str]:
    """Every string in a JSON value (keys too)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from strings_in(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from strings_in(item)


def echoes(message: str, arguments: Any) -> list[str]:
    """Values sent that the message repeats (ids excepted: naming the id is the point).

    The arguments' own keys are field names and categories words of the schema,
    which an error names on purpose; a value the server's source holds is its own wording.
    """
    values = list(arguments.values()) if isinstance(arguments, dict) else arguments
    return [
        value
        for value in strings_in(values)
        if len(value.strip()) >= ECHO_MIN
        and not re.fullmatch(r"[0-9a-f]{16}", value)
        and value not in HALF_LIFE_DAYS
        and value.strip() in message
        and value.strip() not in SERVER_SOURCE
    ]


def test_the_echo_check_tells_the_servers_own_words_from_a_repeated_value() -> None:
    message = "invalid arguments for search_memory: query: Field required"
    assert echoes(message, {"category": "search_memory"}) == []
    assert echoes(message, {"text": "invalid arguments for "}) == []
    assert echoes(f"{message}; text: 'Sister Anna in Zürich'", {"text": "Sister Anna in Zürich"}) == [
        "Sister Anna in Zürich"
    ]


def vault_state(vault: Path) -> tuple[int, int]:
    """How many records the vault holds, and the highest sequence number."""
    with sqlite3.connect(f"file:{vault}?mode=ro", uri=True) as db:
        count, top = db.execute("SELECT count(*), coalesce(max(seq), 0) FROM records").fetchone()
    return int(count), int(top)


class Tally:
    """What a batch did, for the figures and the failure message."""

    def __init__(self) -> None:
        self.calls = 0
        self.accepted = 0
        self.refused = 0
        self.problems: list[str] = []
        self.started = time.monotonic()

    def problem(self, what: str) -> None:
        # Keep the report short: the first few findings say enough.
        if len(self.problems) < 20:
            self.problems.append(what)


def seed(client_call: Any) -> list[str]:
    """Three memories the fuzzing must not disturb; their ids."""
    ids = []
    for text, category in (
        ("Allergic to peanuts", "profile"),
        ("Prefers short answers", "preference"),
        ("Fixing the garden shed roof", "project"),
    ):
        result = client_call("save_memory", {"text": text, "category": category, "tags": ["seed"]})
        assert not result.is_error, result.content
        ids.append(result.structured_content["memory"]["id"])
    return ids


def snapshot(client_call: Any, ids: list[str]) -> Any:
    """What the agent can read of the seeded memories."""
    return [
        client_call("get_memory", {"id": memory_id, "history": True}).structured_content for memory_id in ids
    ]


# --- batch 1: the mcp client ------------------------------------------------------------


@pytest.mark.timeout(600)
def test_hostile_tool_arguments_through_the_mcp_client(cheap_vault_env: dict[str, str]) -> None:
    vault = Path(cheap_vault_env["SQUIRREL_VAULT"])
    tally = Tally()
    registry = secrets_of_this_test()
    with (
        anyio.from_thread.start_blocking_portal() as portal,
        portal.wrap_async_context_manager(Client(server_params(cheap_vault_env))) as client,
    ):

        def client_call(tool: str, arguments: dict[str, Any]) -> Any:
            return portal.call(client.call_tool, tool, arguments)

        ids = seed(client_call)
        before = snapshot(client_call, ids)
        deadline = time.monotonic() + BATCH_SECONDS

        @settings(
            max_examples=CLIENT_EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(drawn=tool_arguments(ids))
        def one_call(drawn: tuple[str, dict[str, Any]]) -> None:
            if time.monotonic() > deadline:
                return
            tool, arguments = drawn
            state = vault_state(vault)
            tally.calls += 1
            result = client_call(tool, arguments)
            if not result.is_error:
                tally.accepted += 1
                if result.structured_content is None:
                    tally.problem(f"{tool}: success without structured content")
                return
            tally.refused += 1
            message = result.content[0].text if result.content else ""
            if not CLEAR_TOOL_ERRORS.fullmatch(message) or len(message) > MAX_MESSAGE:
                tally.problem(f"{tool}: unclear error ({len(message)} chars): {message[:300]!r}")
            if echoes(message, arguments):
                tally.problem(
                    f"{tool}: the error repeats {echoes(message, arguments)[0][:80]!r}: {message[:200]!r}"
                )
            if vault_state(vault) != state:
                tally.problem(f"{tool}: a refused call changed the vault")
            registry.texts.append((f"fuzzed error of {tool}", message))

        one_call()
        after = snapshot(client_call, ids)
        alive = client_call("get_context", {})
    assert not alive.is_error
    assert not tally.problems, tally.problems
    # Seeded memories may have been corrected by a call that happened to be valid; the vault
    # check above is what proves refusals wrote nothing. Untouched ones read back the same.
    changed = [i for i, (old, new) in enumerate(zip(before, after, strict=True)) if old != new]
    for index in changed:
        assert after[index]["memory"]["revision"] > before[index]["memory"]["revision"]
    seconds = time.monotonic() - tally.started
    record(
        "bad-input-tool-arguments",
        runs=1,
        inputs_tried=tally.calls,
        data_lost=0,
        seconds=seconds,
        notes=(
            f"{tally.calls} hypothesis-drawn calls of the 8 tools through the mcp client, one server: "
            f"{tally.refused} refused with a clear tool error, {tally.accepted} valid and served; "
            "0 crashes or hangs, 0 errors echoing a value, 0 refused calls changing the vault"
        ),
    )
    assert tally.calls >= 1000, "the batch ran out of time before 1,000 calls"


# --- batch 2: raw JSON-RPC on the pipes -------------------------------------------------


class RawServer:
    """The server as a subprocess, spoken to line by line: what a buggy client could send.

    Requests run concurrently in the server, so answers come in any order: they are
    kept by id until asked for. Our own ids are strings starting "r", which a random
    line is unlikely to repeat.
    """

    def __init__(self, env: dict[str, str], stderr: Path) -> None:
        self._stderr = stderr.open("w", encoding="utf-8")
        command = server_params(env)
        self.process = subprocess.Popen(
            [command.command, *command.args],
            env={"PATH": os.environ["PATH"], **(command.env or env)},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
        )
        self._lines: queue.Queue[bytes] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._count = 0
        self._waiting: dict[Any, dict[str, Any]] = {}
        # Answers whose id we did not send (to raw lines), in arrival order.
        self.others: list[dict[str, Any]] = []

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line)

    def new_id(self) -> str:
        """A request id of ours."""
        self._count += 1
        return f"r{self._count}"

    def send_line(self, line: bytes) -> None:
        """Write one line (a newline is added)."""
        assert self.process.stdin is not None
        self.process.stdin.write(line + b"\n")
        self.process.stdin.flush()

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """A well-formed request and its answer."""
        request_id = self.new_id()
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send_line(json.dumps(message).encode())
        return self.answer(request_id)

    def answer(self, request_id: Any) -> dict[str, Any]:
        """The answer to `request_id`, waiting for it (AssertionError if none comes)."""
        while request_id not in self._waiting:
            try:
                line = self._lines.get(timeout=ANSWER_TIMEOUT)
            except queue.Empty:
                raise AssertionError(f"no answer to request {request_id} (server hung or died)") from None
            answer = json.loads(line)
            answer_id = answer.get("id")
            if isinstance(answer_id, str) and answer_id.startswith(("r", "s")):
                self._waiting[answer_id] = answer
            else:
                self.others.append(answer)
        return self._waiting.pop(request_id)

    def answers_to_line(self, line: bytes) -> list[dict[str, Any]]:
        """Send a raw line, then a ping: the answers that came before the ping's.

        A line the transport refuses is answered before the next line is read, so
        its answer is in; one that reached the session could still be running.
        """
        self.others.clear()
        self.send_line(line)
        self.request("ping")
        found, self.others = self.others, []
        return found

    def close(self) -> int:
        """Close stdin; the server's exit status."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        code = self.process.wait(timeout=30)
        self._stderr.close()
        return code


@contextmanager
def raw_server(env: dict[str, str], stderr: Path) -> Iterator[RawServer]:
    """An initialized raw session (the server's stderr goes to `stderr`, scanned after the test)."""
    secrets_of_this_test().stderr_files.append(stderr)
    server = RawServer(env, stderr)
    try:
        init = server.request(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"},
            },
        )
        assert "result" in init, init
        server.send_line(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode())
        yield server
    finally:
        if server.process.poll() is None:
            server.close()


def is_notification(line: str) -> bool:
    """True when a line is JSON for an object without an id (JSON-RPC answers those with nothing)."""
    try:
        data = json.loads(line)
    except (ValueError, RecursionError):
        return False
    return isinstance(data, dict) and "id" not in data


def call_line(request_id: str, tool: Any, arguments: Any) -> bytes:
    """A tools/call request, json-encoded as a client would (a lone surrogate becomes an escape)."""
    message = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }
    return json.dumps(message).encode()


def raw_messages() -> st.SearchStrategy[tuple[str, Any]]:
    """What only a raw client sends: (kind, payload)."""
    with_surrogate = st.builds(
        lambda head, bad, tail: head + bad + tail, st.text(max_size=20), SURROGATE, st.text(max_size=20)
    )
    return st.one_of(
        st.tuples(
            st.just("surrogate"),
            st.tuples(
                st.sampled_from(TOOLS),
                st.sampled_from(["text", "query", "entity", "reason", "id", "tags"]),
                with_surrogate,
            ),
        ),
        st.tuples(
            st.just("deep"), st.tuples(st.sampled_from(TOOLS), st.integers(min_value=50, max_value=5000))
        ),
        st.tuples(st.just("arguments"), st.tuples(st.sampled_from(TOOLS), junk())),
        st.tuples(st.just("tool"), st.one_of(junk(), nasty_text())),
        st.tuples(st.just("line"), st.binary(max_size=200).map(lambda b: b.replace(b"\n", b" "))),
    )


@pytest.mark.timeout(600)
def test_hostile_json_rpc_on_the_pipes(cheap_vault_env: dict[str, str], tmp_path: Path) -> None:
    vault = Path(cheap_vault_env["SQUIRREL_VAULT"])
    tally = Tally()
    registry = secrets_of_this_test()
    kinds: dict[str, int] = {}
    with raw_server(cheap_vault_env, tmp_path / "raw-stderr.txt") as server:
        seeded = server.request(
            "tools/call", {"name": "save_memory", "arguments": {"text": "Keeps bees on the roof"}}
        )
        memory_id = seeded["result"]["structuredContent"]["memory"]["id"]
        deadline = time.monotonic() + BATCH_SECONDS

        def check(answers: list[dict[str, Any]], sent: Any, label: str) -> None:
            for answer in answers:
                if "error" in answer:
                    tally.refused += 1
                    message = str(answer["error"].get("message", ""))
                    if not CLEAR_RPC_ERRORS.match(message):
                        tally.problem(f"{label}: unclear JSON-RPC error {message[:300]!r}")
                elif answer.get("result", {}).get("isError"):
                    tally.refused += 1
                    message = answer["result"]["content"][0]["text"]
                    if not CLEAR_TOOL_ERRORS.fullmatch(message):
                        tally.problem(f"{label}: unclear tool error {message[:300]!r}")
                else:
                    tally.accepted += 1
                    continue
                if len(message) > MAX_MESSAGE or echoes(message, sent):
                    tally.problem(f"{label}: the error repeats a value sent")
                registry.texts.append((f"raw error ({label})", message))

        @settings(
            max_examples=RAW_EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck)
        )
        @given(drawn=raw_messages())
        def one_message(drawn: tuple[str, Any]) -> None:
            if time.monotonic() > deadline:
                return
            kind, payload = drawn
            kinds[kind] = kinds.get(kind, 0) + 1
            state = vault_state(vault)
            tally.calls += 1
            request_id = server.new_id()
            line: bytes | None = None
            if kind == "surrogate":
                tool, name, value = payload
                sent: Any = {name: [value] if name == "tags" else value}
                if tool != "save_memory" and name != "id":
                    sent["id"] = memory_id
                line = call_line(request_id, tool, sent)
            elif kind == "deep":
                tool, depth = payload
                # Written as text: Python's own encoder stops near 1,000 levels.
                arguments_text = '{"text": ' + '{"a": [' * depth + '"x"' + "]}" * depth + "}"
                line = call_line(request_id, tool, "ARGUMENTS").replace(
                    b'"ARGUMENTS"', arguments_text.encode()
                )
                sent = {}
            elif kind == "arguments":
                tool, sent = payload
                line = call_line(request_id, tool, sent)
            elif kind == "tool":
                sent = payload
                line = call_line(request_id, sent, {})
            if line is not None:
                server.send_line(line)
                answers = [server.answer(request_id)]
            else:
                sent = payload.decode("utf-8", errors="replace")
                answers = server.answers_to_line(payload)
                # A raw line is answered once, unless it is blank or a notification (no id).
                expect = 0 if not payload.strip(b" \t\r\n") or is_notification(sent) else 1
                if len(answers) != expect:
                    tally.problem(f"line: {len(answers)} answers, expected {expect}: {payload[:80]!r}")
            check(answers, sent, kind)
            if vault_state(vault) != state and not any(
                "result" in answer and not answer["result"].get("isError") for answer in answers
            ):
                tally.problem(f"{kind}: a refused message changed the vault")

        one_message()
        # The bug this fixes: a lone surrogate escape used to be dropped, the client timing out.
        server.send_line(
            b'{"jsonrpc":"2.0","id":"s1","method":"tools/call",'
            b'"params":{"name":"save_memory","arguments":{"text":"tea \\ud800 time"}}}'
        )
        answer = server.answer("s1")
        assert answer["error"]["code"] == -32602 and "lone surrogate" in answer["error"]["message"]
        tally.calls += 1
        kept = server.request("tools/call", {"name": "get_memory", "arguments": {"id": memory_id}})
        assert kept["result"]["structuredContent"]["memory"]["text"] == "Keeps bees on the roof"
        assert server.process.poll() is None
        code = server.close()
    assert code == 0
    assert not tally.problems, tally.problems
    record(
        "bad-input-raw-messages",
        runs=1,
        inputs_tried=tally.calls,
        data_lost=0,
        seconds=time.monotonic() - tally.started,
        notes=(
            f"{tally.calls} raw JSON-RPC lines on one server's stdin ("
            + ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
            + f"): {tally.refused} refused with a clear error, {tally.accepted} served; "
            "every line answered, 0 crashes or hangs, 0 errors echoing a value, vault unchanged by refusals"
        ),
    )
    assert tally.calls >= 700, "the batch ran out of time before 700 messages"
