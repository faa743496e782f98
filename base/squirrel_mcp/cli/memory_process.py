"""The memory process: one per vault, serving the MCP session of every host's bridge at once.

A bridge (`squirrel-mcp` run by an MCP host) starts it when none is listening
on the vault's channel, with the bridge's own environment. It takes the
vault's lock (a second process for the vault waits for the lock, or leaves as
soon as another one listens), listens, and unlocks in the background as the
stdio server does. Every bridge is a session of its own over one store, one
plugin host, one model and one vector table; `squirrel-mcp ui` asks it for
the page, which it serves on that store too while the command runs, and
`squirrel-mcp hook` for one text, a briefing or a prompt's recall
(squirrel_mcp.cli.hook_answers).

A bridge is admitted only when it runs as this user (checked on every
connection), its settings are this process's and its passphrase the one it
was unlocked with; otherwise it hears the one line saying why (see
squirrel_mcp.cli.admission). A hook, which only reads, needs no passphrase and
only the vault and the version of this process. An error in one connection ends that connection
alone, never the process its other bridges use. When the unlock
fails the process stops listening at once (so the next bridge starts a fresh
one, with its own passphrase), answers its bridges the line, and ends when
they have gone. Otherwise it ends once no bridge has been connected for
SQUIRREL_MCP_SHARED_IDLE seconds (600 by default), writing its snapshot as the
stdio server does at its end. Its log lines go to the channel's log file,
which every host shows: a repeated line is left out there (core/lines.py). A
connection it cannot accept (out of descriptors, say) is tried again shortly,
and never ends the process.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import signal
import threading
import time
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread
from anyio.abc import SocketAttribute, SocketListener, SocketStream

from squirrel_mcp.cli.admission import Admission
from squirrel_mcp.cli.background import open_in_background
from squirrel_mcp.cli.hook_answers import answer_hook
from squirrel_mcp.cli.process_lines import CLOSED, Lines, Replies, wait_for_lock
from squirrel_mcp.core.channel import Channel, PeerRefused, check_peer
from squirrel_mcp.core.config import Config, location
from squirrel_mcp.core.hello import (
    IDLE_VARIABLE,
    MAX_HELLO,
    NOT_UNICODE,
    Hello,
    HelloError,
    NotUnicode,
    PageRequest,
    answer,
    identity,
    idle_seconds,
    page_answer,
    settings,
)
from squirrel_mcp.core.lines import log_line, shared_log
from squirrel_mcp.plugins.manager import TRACE_ENV, PluginHost
from squirrel_mcp.serving.limits import raise_file_limit

if TYPE_CHECKING:
    import pluggy

    from squirrel_mcp.server.app import SquirrelServer
    from squirrel_mcp.server.opening import Opening

# How long a bridge may take to say its hello, in seconds.
HELLO_WAIT = 10.0
# Seconds the accept loop waits after a connection could not be accepted (out of descriptors, say).
ACCEPT_BACKOFF = 0.1


async def _accepted(listener: SocketListener) -> SocketStream | None:
    """The next connection; None, after one line and ACCEPT_BACKOFF, when taking it failed.

    Out of descriptors (EMFILE), the connection waits in the socket's queue until some
    are free; a failure never ends the process, which serves every other host on.
    The line is said again at most once a minute (core/lines.py), however long it lasts.
    """
    try:
        return await listener.accept()
    except anyio.BrokenResourceError as broken:
        cause = broken.__cause__
        reason = errno.errorcode.get(cause.errno or 0, "OSError") if isinstance(cause, OSError) else "closed"
        log_line(f"a connection could not be accepted ({reason}); trying again")
        await anyio.sleep(ACCEPT_BACKOFF)
        return None


def _overdue(unanswered: int, waited: float) -> None:
    log_line(f"a bridge left with {unanswered} request(s) still unanswered after {waited:g} s")


class Listening:
    """The channel's socket and lock, as the memory process holds them; each let go of once."""

    def __init__(self, channel: Channel, lock: int) -> None:
        self.channel = channel
        self.socket = channel.listen()
        self._lock: int | None = lock
        self._linked = True

    def leave(self) -> None:
        """Remove the socket's name: no new bridge reaches this process (it starts the next one)."""
        if self._linked:
            self._linked = False
            with contextlib.suppress(FileNotFoundError):
                self.channel.socket_path.unlink()

    def stop(self, *, release: bool = True) -> None:
        """Stop listening; `release` also gives up the vault's lock (once the store is closed)."""
        self.leave()
        self.socket.close()
        if release and self._lock is not None:
            os.close(self._lock)
            self._lock = None


class MemoryProcess:
    """The bridges' sessions on one server, and when to stop."""

    def __init__(
        self,
        server: SquirrelServer,
        host: PluginHost,
        opening: Opening,
        ours: Hello,
        where: str,
        idle: float,
    ) -> None:
        self.server = server
        self.host = host
        self._closed = False
        self.opening = opening
        # Whom it admits: bridges saying `ours`, with the passphrase as it changes.
        self.admission = Admission(ours, where, opening)
        self.where = where
        self.idle = idle
        self.bridges = 0
        self.last_left = time.monotonic()
        # Set when no new bridge is to be taken: the process ends once its bridges have gone.
        self.retiring = False

    async def serve(self, listener: SocketListener, listening: Listening) -> None:
        """Serve every bridge until the process is idle (or retiring, or failed, and left alone).

        When the unlock fails the process stops listening and gives up the lock at once:
        the next bridge then starts a fresh process, which its passphrase may unlock.
        """
        self.listening = listening
        async with anyio.create_task_group() as sessions:
            accepting = anyio.CancelScope()
            accepted = anyio.Event()

            async def accept() -> None:
                try:
                    with accepting:
                        while True:
                            stream = await _accepted(listener)
                            if stream is not None:
                                self.bridges += 1
                                sessions.start_soon(self.session, stream)
                finally:
                    accepted.set()

            async def stop_accepting() -> None:
                accepting.cancel()
                await accepted.wait()

            sessions.start_soon(accept)
            while True:
                await anyio.sleep(0.2)
                failed = self.opening.failure() is not None
                if failed and not accepting.cancel_called:
                    await stop_accepting()
                    listening.stop()
                idle = time.monotonic() - self.last_left >= self.idle
                if self.bridges == 0 and (failed or self.retiring or idle):
                    await stop_accepting()
                    break

    def close(self) -> None:
        """Stop the plugins, close the store (its snapshot written) and its storage; again is a no-op.

        The storage too, unlike a server of its own at its end (whose files the process's
        exit lets go): a bridge may be told the end before this process has exited.
        """
        if not self._closed:
            self._closed = True
            self.host.shutdown()
            self.opening.close(release=True)

    def _retire(self) -> None:
        """Take no new bridge from now on (the next one starts a fresh process)."""
        self.retiring = True
        self.listening.leave()

    async def _admitted(self, stream: SocketStream, lines: Lines) -> Hello | None:
        """The bridge's hello when it said one within HELLO_WAIT and was taken (it heard so).

        A passphrase change's hello is returned unanswered (`Admission.take_change` answers it).
        """
        with anyio.move_on_after(HELLO_WAIT):
            line = await lines.line(MAX_HELLO)
            if line is None:
                return None
            try:
                hello = Hello.read(line)
            except HelloError as error:
                log_line(f"a connection that is no bridge was closed ({error})")
                if isinstance(error, NotUnicode):
                    # A bridge whose host's config holds such text hears why (else it would try again).
                    await stream.send(answer(NOT_UNICODE))
                return None
            if hello.changed:
                return None if self.retiring else hello
            if hello.hook is not None:
                refused = self.admission.hook_refusal(hello)
                if self.retiring:
                    return None
                await stream.send(answer(refused))
                return hello if refused is None else None
            refused = self.admission.refusal(hello)
            if refused is not None and await self.admission.passphrase_changed_to(hello):
                # `squirrel-mcp passphrase` ran while this process served: the new one is ours.
                refused = None
            if self.retiring:
                return None
            if refused is not None and (self.opening.failure() is not None or self.bridges == 1):
                # No answer, so that the bridge starts a fresh process with its own settings and
                # passphrase: this one's unlock failed (a bridge like the one that failed is taken,
                # the failure is its answer too), or no other bridge uses it (a host restarted with
                # a new config is not told to wait until this one is idle).
                if self.opening.failure() is None:
                    self._retire()
                return None
            await stream.send(answer(refused))
            return hello if refused is None else None
        return None

    async def _page(self, request: PageRequest, stream: SocketStream, lines: Lines) -> None:
        """`squirrel-mcp ui`: the page on this process's store, served until its command's connection closes.

        It waits for the unlock (the command waits with it); the page sees the plugins and
        the memories the bridges' sessions see, and the same writes.
        """
        from squirrel_mcp.core.config import ConfigError
        from squirrel_mcp.ui.serve import Page

        while (store := self.opening.store()) is None and self.opening.failure() is None:
            await anyio.sleep(0.1)
        if store is None:
            await stream.send(page_answer(error=self.opening.failure()))
            return
        try:
            # The request's fields are the page's own: its port, hand-off and idle time.
            making = functools.partial(Page, store, self.host, where=self.where, **request._asdict())
            page = await anyio.to_thread.run_sync(making)
        except ConfigError as error:
            await stream.send(page_answer(error=str(error)))
            return
        try:
            page.start()
            handoff = None if page.handoff is None else page.handoff.uri
            await stream.send(page_answer(url=page.url, handoff=handoff))
            # Served until `squirrel-mcp ui` ends (Ctrl-C): it says nothing more, its connection closes.
            while await lines.line(MAX_HELLO) is not None:
                pass
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(page.stop)

    async def session(self, stream: SocketStream) -> None:
        """One bridge: its peer checked, its hello judged, then its MCP session."""
        try:
            async with stream:
                try:
                    peer = stream.extra(SocketAttribute.raw_socket)  # noqa: S610 - anyio's, not Django's
                    check_peer(peer)
                except PeerRefused as refused:
                    log_line(str(refused))
                    return
                lines = Lines(stream)
                hello = await self._admitted(stream, lines)
                if hello is None:
                    return
                if hello.changed:
                    await stream.send(answer(await self.admission.take_change(hello)))
                    return
                if hello.hook is not None:
                    await answer_hook(hello.hook, hello.project, self.opening, self.host, stream)
                elif hello.page is not None:
                    await self._page(hello.page, stream, lines)
                else:
                    from squirrel_mcp.server.stdio import line_transport

                    async with line_transport(lines, Replies(stream), on_overdue=_overdue) as (reads, writes):
                        await self.server.serve_session(reads, writes, hello.project)
                if self.bridges == 1 and self.idle == 0:
                    # The last bridge, and no idle time: the next host, which may come at once
                    # with other settings, starts a fresh process; and this one's host sees
                    # the end of the process as a server of its own's (the store closed, its
                    # snapshot and vector file written) before its connection closes.
                    self._retire()
                    await anyio.to_thread.run_sync(self.close)
        except (*CLOSED, anyio.DelimiterNotFound, OSError):
            pass  # the bridge went away: its session is over
        except Exception as error:  # one connection's failure is its own
            # Its type alone: the error's text may hold what the connection said.
            log_line(
                f"a connection ended on an error ({type(error).__name__}); the other hosts are served on"
            )
        finally:
            self.bridges -= 1
            self.last_left = time.monotonic()


def _end(signum: int, _frame: object) -> None:
    raise SystemExit(0)


def cmd_memory_process(config: Config, pm: pluggy.PluginManager) -> int:
    """Serve the vault's channel until idle; 0 also when another process serves it already.

    It listens before it imports the server: the bridge that started it connects at once
    and waits for its answer, instead of trying again until the socket is there. The
    vault's own code (storage, cryptography) is imported by the unlock, in the background.
    """
    env = dict(os.environ)
    # Its log is every host's: a flood of one failure leaves a line a minute, not megabytes;
    # all of it when hook tracing was asked for (a line per hook call, by a person reading them).
    shared_log(limit=env.get(TRACE_ENV, "") in ("", "0"))
    # Each host's connection and the page's take descriptors: the most the system allows.
    raise_file_limit()
    idle = idle_seconds(env.get(IDLE_VARIABLE))
    if config.lacks_secret:
        from squirrel_mcp.cli.unlock import from_keychain

        config = from_keychain(config)
    served = identity(config)
    channel = Channel.of(served, env)
    lock = wait_for_lock(channel)
    if lock is None:
        return 0
    where = location(config)
    listening = Listening(channel, lock)
    from squirrel_mcp.server.app import create_server
    from squirrel_mcp.server.opening import Opening

    host = PluginHost(pm)
    opening = Opening()
    server = create_server(opening, host)
    ours = Hello(served, settings(config, env), config.passphrase)
    # Built: the opening may take the interpreter (it does not wait for a first bridge).
    opening.serving()
    threading.Thread(
        target=open_in_background, args=(config, host, opening, 0.0), name="squirrel-mcp-open", daemon=True
    ).start()
    process = MemoryProcess(server, host, opening, ours, where, idle)
    # Ended by a signal (a logout, `kill`): as at the idle end, the store closed and its snapshot written.
    signal.signal(signal.SIGTERM, _end)
    signal.signal(signal.SIGHUP, _end)

    async def main() -> None:
        await process.serve(await SocketListener.from_socket(listening.socket), listening)

    try:
        anyio.run(main)
    finally:
        # No bridge is served any more: the socket goes first, the lock once the store has
        # written its snapshot, so that no next process opens the vault before.
        listening.stop(release=False)
        process.close()
        listening.stop()
    return 0


def main() -> int:
    """`python -m squirrel_mcp.cli.memory_process`, as a bridge starts it (with its environment)."""
    from squirrel_mcp.plugins.manager import get_plugin_manager, load_plugins

    pm = get_plugin_manager()
    load_plugins(pm)
    return cmd_memory_process(Config.from_env(), pm)


if __name__ == "__main__":
    raise SystemExit(main())
