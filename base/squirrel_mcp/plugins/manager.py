"""The plugin manager, `load_plugins()`, and the host that calls plugins without trusting them.

Plugins are found through the entry-point group `squirrel_mcp`, like llm's and
datasette's:

    SQUIRREL_MCP_PLUGINS unset       every installed plugin loads
    SQUIRREL_MCP_PLUGINS=""          none does (the built-in lexical ranker always runs)
    SQUIRREL_MCP_PLUGINS=a,b         only the entry points named a and b
    SQUIRREL_MCP_TRACE_HOOKS=1       one stderr line per hook call and its result

Tracing names hooks, plugins and the types and sizes of arguments, never their
values: a query or a memory's text must not reach a log.

`PluginHost` runs the hooks. Each installed plugin gets a background thread for
`startup`, `memories_changed` and `shutdown`, so a slow plugin neither holds up
the MCP handshake nor another plugin. A search waits up to READY_WAIT for a ranker
whose startup has not returned yet (a model loading); past that it is answered by
words, with STARTING_NOTE, so that an agent never takes "nothing found by words"
for "nothing there". A ranker runs under a time bound, and an answer that raises,
breaks the `Ranking` rules or comes too late is not used: that search is lexical,
the plugin is set aside for the session, one line says so.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib
import importlib.metadata
import os
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import pluggy

from squirrel_mcp.core.config import Config
from squirrel_mcp.core.lines import log_line, notice_line
from squirrel_mcp.core.models import Revision
from squirrel_mcp.plugins import hookspecs
from squirrel_mcp.search.ranking import Candidate, Ranking, RankOptions, check_ranking

if TYPE_CHECKING:
    # Imported where a store is at hand: a server answers its handshake before it opens one.
    from squirrel_mcp.book.memories import MemoryStore

ENTRY_POINT_GROUP = "squirrel_mcp"
PLUGINS_ENV = "SQUIRREL_MCP_PLUGINS"
TRACE_ENV = "SQUIRREL_MCP_TRACE_HOOKS"
# Registered always, by these names, whatever SQUIRREL_MCP_PLUGINS says.
DEFAULT_PLUGINS = {"lexical": "squirrel_mcp.default_plugins.lexical"}
# A ranker still busy after this long is given up on for the session: the agent waits once, not per search.
RANK_TIMEOUT = 10.0
# How long a search waits for a ranker whose startup has not returned (its model still loading):
# about what loading the embeddings plugin's model takes on a laptop, so that a host which starts
# the server for one question gets it answered by meaning, while the wait stays well inside what
# hosts allow a tool call. Past it the answer is by words, with STARTING_NOTE.
READY_WAIT = 3.0
STARTING_NOTE = (
    "Search by meaning is still starting (its model is loading), so this answer is by words only: "
    "a memory worded differently from the query is not found yet. Search again in a few seconds."
)
# How long the server waits, at exit, for every plugin's shutdown together.
SHUTDOWN_TIMEOUT = 5.0

Log = Callable[[str], None]


def get_plugin_manager() -> pluggy.PluginManager:
    """A plugin manager with the hook specs and the default plugins, and nothing installed."""
    pm = pluggy.PluginManager("squirrel_mcp")
    pm.add_hookspecs(hookspecs)
    for name, module in DEFAULT_PLUGINS.items():
        pm.register(importlib.import_module(module), name=name)
    return pm


def load_plugins(pm: pluggy.PluginManager, env: Mapping[str, str] | None = None, log: Log = log_line) -> None:
    """Register the installed plugins SQUIRREL_MCP_PLUGINS allows; trace if SQUIRREL_MCP_TRACE_HOOKS=1.

    A plugin that cannot be imported or implements a hook that does not exist is
    left out with one line on stderr (its name and the error's type only).
    """
    env = os.environ if env is None else env
    listed = env.get(PLUGINS_ENV)
    wanted = None if listed is None else {name.strip() for name in listed.split(",") if name.strip()}
    # An empty list asks for none: the scan of every installed distribution's metadata is skipped.
    installed = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP) if wanted != set() else ()
    for entry_point in installed:
        if wanted is not None and entry_point.name not in wanted:
            continue
        try:
            plugin = entry_point.load()
            pm.register(plugin, name=entry_point.name)
        except Exception as error:
            log(f"plugin {entry_point.name} was not loaded ({type(error).__name__})")
            continue
        try:
            pm.check_pending()
        except pluggy.PluginValidationError:
            pm.unregister(plugin)
            log(f"plugin {entry_point.name} was not loaded (it implements a hook that does not exist)")
    for name in sorted((wanted or set()) - {pm.get_name(plugin) for plugin in pm.get_plugins()}):
        log(f"plugin {name} named in {PLUGINS_ENV} is not loaded")
    if env.get(TRACE_ENV, "") not in ("", "0"):
        trace_hooks(pm, log)


def one_plugin_caller(pm: pluggy.PluginManager, hook: str, name: str) -> pluggy.HookCaller:
    """A hook caller that reaches the plugin `name` only, so a failure is known to be that plugin's."""
    # Made afresh each time (it is cheap), so a plugin registered later is never let in.
    others = [plugin for plugin in pm.get_plugins() if pm.get_name(plugin) != name]
    return pm.subset_hook_caller(hook, remove_plugins=others)


def register_commands(
    pm: pluggy.PluginManager,
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    log: Log = log_line,
) -> None:
    """Let each plugin add its subcommands to `commands`; one that fails is left out, saying so."""
    for plugin in pm.get_plugins():
        name = pm.get_name(plugin)
        assert name is not None
        caller = one_plugin_caller(pm, "register_commands", name)
        if not caller.get_hookimpls():
            continue
        try:
            caller(commands=commands)
        except Exception as error:
            log(f"plugin {name}'s commands were not added ({type(error).__name__})")


def shape(value: object) -> str:
    """A value's type and size, for tracing: never its content."""
    if isinstance(value, Ranking):
        return f"Ranking[{len(value.hits)} hits, {value.ranking}]"
    # A named tuple (Config) is a record, not a collection: its type only.
    if isinstance(value, list | tuple | set | frozenset | dict) and not hasattr(value, "_fields"):
        return f"{type(value).__name__}[{len(value)}]"
    return type(value).__name__


def trace_hooks(pm: pluggy.PluginManager, log: Log = log_line) -> None:
    """Log each hook call: its name, its arguments' types and sizes, the plugins called, the result's type."""

    def before(hook_name: str, hook_impls: Sequence[pluggy.HookImpl], kwargs: Mapping[str, object]) -> None:
        arguments = ", ".join(f"{name}={shape(value)}" for name, value in kwargs.items())
        plugins = ", ".join(impl.plugin_name for impl in reversed(hook_impls))
        log(f"hook {hook_name}({arguments}) -> [{plugins}]")

    def after(
        outcome: pluggy.Result[object],
        hook_name: str,
        hook_impls: Sequence[pluggy.HookImpl],
        kwargs: Mapping[str, object],
    ) -> None:
        if outcome.exception is not None:
            log(f"hook {hook_name} raised {type(outcome.exception).__name__}")
        else:
            log(f"hook {hook_name} returned {shape(outcome.get_result())}")

    pm.add_hookcall_monitoring(before, after)


class _Worker:
    """One plugin's background thread: runs its start-up, change and shutdown calls in order."""

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        # A daemon: a plugin stuck in a hook must not keep the process alive after shutdown's bound.
        self.thread = threading.Thread(target=self._run, name=f"squirrel-mcp-plugin-{name}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            job()

    def submit(self, job: Callable[[], None]) -> None:
        self._jobs.put(job)

    def stop(self) -> None:
        self._jobs.put(None)


class PluginHost:
    """Calls the registered plugins' hooks for the server, isolating it from their failures."""

    def __init__(
        self,
        pm: pluggy.PluginManager,
        log: Log = log_line,
        rank_timeout: float = RANK_TIMEOUT,
        notice: Log = notice_line,
        ready_wait: float = READY_WAIT,
    ) -> None:
        """Host the plugins registered in `pm`; `log` writes one prefixed stderr line, `notice` one as is."""
        self.pm = pm
        self.rank_timeout = rank_timeout
        self.ready_wait = ready_wait
        self._log = log
        self._notice = notice
        self._lock = threading.Lock()
        self._set_aside: set[str] = set()
        self._started: set[str] = set()
        # Set once a plugin's startup is over, whether it returned or failed.
        self._startup_over: dict[str, threading.Event] = {}
        self._workers: dict[str, _Worker] = {}
        self._store: MemoryStore | None = None
        # Start and shutdown may race (the server unlocks in a thread while the client
        # can close at any time): once shut down, a late start starts nothing.
        self._lifecycle = threading.Lock()
        self._shut_down = False

    def _installed(self) -> list[tuple[str, object]]:
        """Every registered plugin but the defaults, by name."""
        named = [(self.pm.get_name(plugin), plugin) for plugin in self.pm.get_plugins()]
        return [(name, plugin) for name, plugin in named if name is not None and name not in DEFAULT_PLUGINS]

    def _fail(self, name: str, hook: str, reason: str) -> None:
        with self._lock:
            if name in self._set_aside:
                return
            self._set_aside.add(name)
        self._log(f"plugin {name} failed in {hook} ({reason}); it is set aside for this session")

    def _guarded(self, name: str, hook: str, **kwargs: object) -> None:
        """Call one plugin's hook in its worker thread; a failure sets the plugin aside."""
        if name in self._set_aside:
            return
        caller = one_plugin_caller(self.pm, hook, name)
        try:
            # Only hooks the plugin implements, so a trace shows real calls.
            if caller.get_hookimpls():
                caller(**kwargs)
        except Exception as error:
            self._fail(name, hook, type(error).__name__)
            return
        if hook == "startup":
            with self._lock:
                self._started.add(name)

    def start(self, config: Config, store: MemoryStore) -> None:
        """Start every installed plugin in its own thread, then tell it of each change to `store`.

        After `shutdown` this does nothing: the plugins would never hear their shutdown.
        """
        with self._lifecycle:
            if not self._shut_down:
                self._start(config, store)

    def _start(self, config: Config, store: MemoryStore) -> None:
        # A plugin needs neither the passphrase nor the API key: it reads memories through `memories`.
        from squirrel_mcp.book.reader import MemoryReader

        safe = config._replace(passphrase=None, api_key=None)
        reader = MemoryReader(store)
        for name, _ in self._installed():
            if not one_plugin_caller(self.pm, "startup", name).get_hookimpls():
                # Nothing to wait for: a plugin without a startup hook ranks from the first search.
                with self._lock:
                    self._started.add(name)
            worker = self._workers[name] = _Worker(name)
            over = self._startup_over[name] = threading.Event()
            worker.submit(
                functools.partial(
                    self._guarded,
                    name,
                    "startup",
                    config=safe,
                    memories=reader,
                    log=self._log,
                    notice=self._notice,
                )
            )
            # A worker runs its jobs in order, so this one runs once startup is over.
            worker.submit(over.set)
        self._store = store
        store.listeners.append(self._changed)

    def wait_started(self, timeout: float) -> bool:
        """Wait until every plugin's startup hook has returned or failed; False if `timeout` passed first.

        The server's searches wait at most READY_WAIT (`rank`); the recall gate and the
        diagnostic wait longer, so they measure the plugins' ranking, not a fall-back.
        """
        deadline = time.monotonic() + timeout
        return all(over.wait(max(0.0, deadline - time.monotonic())) for over in self._startup_over.values())

    def _changed(self, revisions: Sequence[Revision]) -> None:
        changed = list(revisions)
        for name, worker in self._workers.items():
            worker.submit(functools.partial(self._guarded, name, "memories_changed", revisions=changed))

    def shutdown(self, timeout: float = SHUTDOWN_TIMEOUT) -> None:
        """Call every plugin's shutdown hook and wait for them, `timeout` seconds at most in all."""
        with self._lifecycle:
            self._shut_down = True
            self._shutdown(timeout)

    def _shutdown(self, timeout: float) -> None:
        if self._store is not None:
            self._store.listeners.remove(self._changed)
            self._store = None
        for name, worker in self._workers.items():
            worker.submit(functools.partial(self._guarded, name, "shutdown"))
            worker.stop()
        deadline = time.monotonic() + timeout
        for worker in self._workers.values():
            worker.thread.join(max(0.0, deadline - time.monotonic()))
        self._workers.clear()

    def has_rankers(self) -> bool:
        """Whether a ranker besides the default one may answer (so it needs every candidate)."""
        return any(
            impl.plugin_name not in DEFAULT_PLUGINS and impl.plugin_name not in self._set_aside
            for impl in self.pm.hook.rank_memories.get_hookimpls()
        )

    def _bounded(
        self, name: str, kwargs: dict[str, object], hook: str = "rank_memories"
    ) -> tuple[object, str | None]:
        """One plugin's answer to `hook`, or why there is none: it raised or was too slow."""
        outcome: list[tuple[object, str | None]] = []
        done = threading.Event()

        def run() -> None:
            try:
                outcome.append((one_plugin_caller(self.pm, hook, name)(**kwargs), None))
            except Exception as error:
                outcome.append((None, type(error).__name__))
            finally:
                done.set()

        threading.Thread(target=run, name=f"squirrel-mcp-rank-{name}", daemon=True).start()
        if not done.wait(self.rank_timeout):
            return None, f"no answer within {self.rank_timeout:g} s"
        return outcome[0]

    def rank(
        self,
        query: str,
        candidates: Sequence[Candidate],
        total: int,
        options: RankOptions,
        lookup: Callable[[str], Revision | None],
    ) -> Ranking:
        """The first usable ranking, in pluggy's call order; the lexical default's when no other is.

        A ranker whose startup has not returned yet is waited for, READY_WAIT at most
        in all; if one is still starting then, the lexical answer carries STARTING_NOTE.
        """
        kwargs: dict[str, object] = {
            "query": query,
            "candidates": candidates,
            "total": total,
            "options": options,
        }
        deadline: float | None = None
        starting = False
        for impl in reversed(self.pm.hook.rank_memories.get_hookimpls()):
            name = impl.plugin_name
            if name in DEFAULT_PLUGINS:
                # The built-in ranker is the server's own code: a failure there is a bug, and crashes loudly.
                answer = one_plugin_caller(self.pm, "rank_memories", name)(**kwargs)
                assert isinstance(answer, Ranking)
                return dataclasses.replace(answer, note=STARTING_NOTE) if starting else answer
            over = self._startup_over.get(name)
            if name not in self._started and over is not None:
                deadline = time.monotonic() + self.ready_wait if deadline is None else deadline
                over.wait(max(0.0, deadline - time.monotonic()))
                # Still starting, rather than failed (set aside, said on stderr): worth a retry soon.
                starting = starting or not over.is_set()
            if name in self._set_aside or name not in self._started:
                continue
            answer, failure = self._bounded(name, kwargs)
            if failure is None and answer is not None:
                failure = check_ranking(answer, candidates, options, lookup)
            if failure is not None:
                self._fail(name, "rank_memories", failure)
            elif isinstance(answer, Ranking):
                return answer
        raise RuntimeError("the default lexical ranker is not registered")

    def similar(
        self, memory: Revision, limit: int, lookup: Callable[[str], Revision | None]
    ) -> list[tuple[Revision, float]]:
        """The memories a started plugin finds close in meaning to `memory` (similar_memories), closest first.

        `lookup` gives a live memory by id (None: unknown or deleted). A plugin still
        starting is not waited for; one whose answer breaks the hook's rules is set aside.
        """
        kwargs: dict[str, object] = {"memory": memory, "limit": limit}
        for impl in self.pm.hook.similar_memories.get_hookimpls():
            name = impl.plugin_name
            if name in self._set_aside or name not in self._started:
                continue
            answer, failure = self._bounded(name, kwargs, "similar_memories")
            if failure is None and answer is not None:
                found, failure = _similar(answer, memory, limit, lookup)
                if failure is None:
                    return found
            if failure is not None:
                self._fail(name, "similar_memories", failure)
        return []


def _similar(
    answer: object, memory: Revision, limit: int, lookup: Callable[[str], Revision | None]
) -> tuple[list[tuple[Revision, float]], str | None]:
    """A similar_memories answer as memories with their closeness; or why it breaks the hook's rules."""
    if not isinstance(answer, list) or len(answer) > limit:
        return [], "returned more than the limit, or not a list"
    found = []
    for pair in answer:
        if not (isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[1], float)):
            return [], "returned something other than (id, closeness) pairs"
        memory_id, closeness = pair
        other = lookup(memory_id) if isinstance(memory_id, str) and memory_id != memory.id else None
        if other is None:
            return [], "named an unknown id, a deleted memory or the memory itself"
        if not -1.0 <= closeness <= 1.0:
            return [], "returned a closeness outside -1 to 1"
        found.append((other, closeness))
    return found, None
