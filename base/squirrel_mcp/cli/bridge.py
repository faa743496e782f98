"""The bridge: what `squirrel-mcp` is for an MCP host when the vault's memory is shared.

It holds no key and no memory. It connects to the vault's memory process over
the local channel (starting the process, with its own environment, when none
listens), says its hello, and relays the host's MCP session line by line both
ways. When the memory process ends under it (killed, crashed), every request
the process had not answered is answered here with an error saying the call
may or may not have been done (a write is never silently sent again); the
bridge then connects to a new memory process, replays the host's handshake to
it, and relays the next calls there. A request that could not be sent at all
(the connection was already gone) reached no process: it goes to the new one.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import threading
import time
from typing import IO, TYPE_CHECKING, Any

from squirrel_mcp.cli.starting import ProcessLog, start_process
from squirrel_mcp.cli.starting import Unreachable as Unreachable
from squirrel_mcp.core.channel import Channel, try_lock
from squirrel_mcp.core.hello import ChannelFailure, Hello, greet
from squirrel_mcp.core.lines import log_line

if TYPE_CHECKING:
    # Imported where a bridge starts the memory process only: a bridge stays small.
    import subprocess

# How long a bridge waits for a memory process it started to listen, in seconds.
START_WAIT = 60.0
# How often a memory process this bridge started may end before it listens: then the host is
# served on its own at once (a process that cannot start would fail each time).
EARLY_ENDS = 3
# The pause before the next start after such an end, doubled at each, in seconds.
RESTART_PAUSE = 0.25
# How often a bridge looks for a listening process while one starts, in seconds.
POLL = 0.05
# How often a bridge shows the memory process's new log lines, in seconds.
LOG_EVERY = 0.25
# How long the bridge waits for the answers still due once its host has closed its input.
END_WAIT = 40.0
LOST = (
    "the memory process ended before answering this call, which may or may not have been done; "
    "it was not sent again: check (search_memory, get_memory) before repeating a save or a change"
)
LOST_CODE = -32603
REPLAYED_ID = "squirrel-mcp-bridge-initialize"
# What `bridged` returns when it relayed the session, and what the server is told when it was not tried.
RELAYED = "relayed"
NOT_TRIED = "not tried"


def _message(line: bytes) -> dict[str, Any] | None:
    try:
        data = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _request_key(request_id: object) -> str:
    return json.dumps(request_id)


class Bridge:
    """One host's way to its vault's memory process."""

    def __init__(self, channel: Channel, hello: Hello, env: dict[str, str]) -> None:
        self.channel = channel
        self.hello = hello
        self.env = env
        # How far this host has seen the memory process's log (`show_log`).
        self.log = ProcessLog(channel.log_path)

    def show_log(self) -> None:
        """The memory process's log lines since this host connected, on this host's stderr.

        So a host's log shows what the server says (the unlock's failure, the warm-up), as
        when it runs its own server. The log holds no memory text, query or secret.
        """
        written = self.log.unread()
        if written:
            sys.stderr.buffer.write(written)
            sys.stderr.flush()

    def follow_log(self, stop: threading.Event) -> None:
        """`show_log` every LOG_EVERY seconds until `stop`, then once more."""
        while not stop.wait(LOG_EVERY):
            self.show_log()
        self.show_log()

    def connect(self) -> tuple[socket.socket, IO[bytes]] | str:
        """A connection the memory process took (and its reader), or the line it refused this host with.

        Unreachable when none listens within START_WAIT, even after starting one, or when
        the one this bridge started ended before listening EARLY_ENDS times (restarted after
        a pause that doubles each time): the host is then served on its own at once.
        """
        deadline = time.monotonic() + START_WAIT
        child: subprocess.Popen[bytes] | None = None
        begins = ends = 0
        next_start = 0.0
        # Of the bridges that find no process, the one holding the start lock starts it; the
        # others wait for it to listen (so that hosts started together start one process).
        starting: int | None = None
        self.log.mark()
        try:
            while time.monotonic() < deadline:
                connected = self.ask()
                if connected is not None:
                    return connected
                if starting is None:
                    starting = try_lock(self.channel.start_path)
                if starting is not None and child is not None and child.poll() is not None:
                    # Status 0: another process listened first (this one left it the vault).
                    if child.returncode != 0:
                        ends += 1
                        if ends >= EARLY_ENDS:
                            raise self._ended_at_start(ends, begins)
                        next_start = time.monotonic() + RESTART_PAUSE * 2 ** (ends - 1)
                    child = None
                if starting is not None and child is None and time.monotonic() >= next_start:
                    try:
                        child, begins = start_process(self.channel, self.log, self.env)
                    except OSError as error:
                        cause = type(error).__name__
                        raise Unreachable(f"the memory process could not be started ({cause})") from None
                time.sleep(POLL)
        finally:
            if starting is not None:
                os.close(starting)
        raise Unreachable(
            f"no memory process listened within {START_WAIT:g} s; its log is {self.channel.log_path}"
        )

    def _ended_at_start(self, ends: int, begins: int) -> Unreachable:
        """Why this bridge gives up starting the memory process: its log's last line quoted."""
        reason = f"the memory process ended as it started, {ends} times; its log is {self.channel.log_path}"
        return Unreachable(reason, self.log.last_line(begins) or "(it wrote nothing)")

    def ask(self) -> tuple[socket.socket, IO[bytes]] | str | None:
        """Connected and taken (the connection), or refused (the line); None: no process answered."""
        try:
            return greet(self.channel, self.hello)
        except ChannelFailure as failure:
            raise Unreachable(str(failure)) from None


class Relay:
    """The host's session relayed to the memory process, across the process's restarts."""

    def __init__(self, bridge: Bridge, connection: socket.socket, reader: IO[bytes]) -> None:
        self.bridge = bridge
        self.changed = threading.Condition()
        self.connection: socket.socket | None = connection
        self.reader = reader
        # The requests sent and not yet answered: (id, method) by id.
        self.outstanding: dict[str, tuple[object, str]] = {}
        self.initialize: bytes | None = None
        self.initialize_id: object = None
        self.initialize_answered = False
        self.initialized: bytes | None = None
        self.input_ended = False
        # Set when no memory process can be reached any more: every later request is answered it.
        self.gone: str | None = None
        self.out = sys.stdout.buffer
        self.out_lock = threading.Lock()

    def write_out(self, line: bytes) -> None:
        """A line to the host; the host gone, the bridge ends (nothing it could say would arrive)."""
        try:
            with self.out_lock:
                self.out.write(line)
                self.out.flush()
        except (BrokenPipeError, ValueError, OSError):
            os._exit(0)

    def answer_error(self, request_id: object, method: object, message: str) -> None:
        """Answer the host's request `request_id` with `message`: a tool's error for a tool call."""
        answer: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id}
        if method == "tools/call":
            # As a tool's own errors are answered: the agent reads it as the call's outcome.
            # resultType: the protocol's later versions require it, the earlier ones allow it.
            answer["result"] = {
                "content": [{"type": "text", "text": message}],
                "isError": True,
                "resultType": "complete",
            }
        else:
            answer["error"] = {"code": LOST_CODE, "message": message}
        self.write_out(json.dumps(answer).encode("utf-8") + b"\n")

    def up(self) -> None:
        """The host's lines to the memory process, until the host closes its input."""
        stdin = sys.stdin.buffer
        while line := stdin.readline():
            if not line.endswith(b"\n"):
                line += b"\n"
            self._send(line, _message(line))
        with self.changed:
            self.input_ended = True
            if self.connection is not None:
                with contextlib.suppress(OSError):
                    self.connection.shutdown(socket.SHUT_WR)
            self.changed.notify_all()

    def _send(self, line: bytes, message: dict[str, Any] | None) -> None:
        """One line of the host's to the memory process; to the next one if it never left for this one.

        A line that could not be sent whole was read by no process: a request in it is sent
        again to the next process (unless the reading side has answered it already), as if
        the host had sent it then. A request that did leave is never sent again.
        """
        failed_on: socket.socket | None = None
        while True:
            with self.changed:
                while (self.connection is None or self.connection is failed_on) and self.gone is None:
                    self.changed.wait()
                if self.gone is not None:
                    if message is not None and "method" in message and "id" in message:
                        self.answer_error(message["id"], message["method"], self.gone)
                    return
                self._note(message, line)
                connection = self.connection
                assert connection is not None
            try:
                connection.sendall(line)
                return
            except OSError:
                with self.changed:
                    if not self._unsent(message):
                        # A notification, the handshake (replayed to the next process), or a
                        # request the reading side has answered as lost already.
                        return
                failed_on = connection

    def _unsent(self, message: dict[str, Any] | None) -> bool:
        """Take back a request that reached no process; False when there is none to. Under the lock."""
        if message is None or "id" not in message or message.get("method") == "initialize":
            return False
        return self.outstanding.pop(_request_key(message["id"]), None) is not None

    def _note(self, message: dict[str, Any] | None, line: bytes) -> None:
        """Remember a request until its answer, and the handshake to replay to a new process."""
        if message is None:
            return
        method = message.get("method")
        if method == "initialize" and "id" in message:
            self.initialize, self.initialize_id = line, message["id"]
        elif method == "notifications/initialized":
            self.initialized = line
        elif method == "notifications/cancelled":
            params = message.get("params")
            if isinstance(params, dict):
                self.outstanding.pop(_request_key(params.get("requestId")), None)
        if isinstance(method, str) and "id" in message and method != "initialize":
            self.outstanding[_request_key(message["id"])] = (message["id"], method)

    def down(self) -> None:
        """The memory process's lines to the host; on its end, the lost answers and a new process."""
        while True:
            with contextlib.suppress(OSError, ValueError):
                # Read until the process closes the connection (or it is reset: the process died).
                for line in self.reader:
                    self._pass_down(line)
            with self.changed:
                lost = list(self.outstanding.values())
                self.outstanding.clear()
                ended = self.input_ended
                self.connection = None
            for request_id, method in lost:
                self.answer_error(request_id, method, LOST)
            if ended:
                return
            log_line("the memory process ended; connecting to a new one")
            self._reconnect()
            if self.gone is not None:
                return

    def _pass_down(self, line: bytes) -> None:
        """A line of the memory process to the host; an answer settles its request."""
        message = _message(line)
        if message is not None and "method" not in message and "id" in message:
            with self.changed:
                if self.initialize is not None and message.get("id") == self.initialize_id:
                    self.initialize_answered = True
                self.outstanding.pop(_request_key(message["id"]), None)
        self.write_out(line if line.endswith(b"\n") else line + b"\n")

    def _reconnect(self) -> None:
        """A new memory process, told this host's handshake; or `gone` set to why there is none."""
        try:
            connected = self.bridge.connect()
            if isinstance(connected, str):
                raise Unreachable(connected)
            connection, reader = connected
            self._replay(connection, reader)
        except (Unreachable, OSError) as error:
            line = str(error) if isinstance(error, Unreachable) else "the new memory process ended at once"
            log_line(line)
            # The answers say the reason; the log's last line goes to the host's log alone.
            reason = error.reason if isinstance(error, Unreachable) else line
            with self.changed:
                self.gone = f"squirrel-mcp: {reason}"
                self.changed.notify_all()
            return
        with self.changed:
            self.connection, self.reader = connection, reader
            if self.input_ended:
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_WR)
            self.changed.notify_all()

    def _replay(self, connection: socket.socket, reader: IO[bytes]) -> None:
        """The host's handshake, told again to a new process; its answer kept from the host."""
        if self.initialize is None:
            return
        if not self.initialize_answered:
            # The first answer was lost with the process: the host waits for this one.
            connection.sendall(self.initialize)
            return
        request = json.loads(self.initialize)
        request["id"] = REPLAYED_ID
        connection.sendall(json.dumps(request).encode("utf-8") + b"\n")
        for line in reader:
            message = _message(line)
            if message is not None and message.get("id") == REPLAYED_ID:
                break
        else:
            raise OSError("ended during the handshake")
        if self.initialized is not None:
            connection.sendall(self.initialized)


def run(bridge: Bridge) -> str | None:
    """Relay this process's stdio to the memory process; the line it refused this host with, if so.

    Unreachable when no memory process can be reached or started.
    """
    connected = bridge.connect()
    if isinstance(connected, str):
        return connected
    relay = Relay(bridge, *connected)
    stop = threading.Event()
    log = threading.Thread(target=bridge.follow_log, args=(stop,), name="squirrel-mcp-log", daemon=True)
    log.start()
    down = threading.Thread(target=relay.down, name="squirrel-mcp-down", daemon=True)
    down.start()
    relay.up()
    down.join(END_WAIT)
    stop.set()
    log.join(LOG_EVERY * 4)
    return None
