"""The plugin system in process: each hook, loading control, tracing, isolation, and the meta-tests.

Throwaway plugins are small classes registered in a fixture and unregistered in
`finally`, so nothing installed in this environment leaks into these tests.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.book.reader import MemoryReader
from squirrel_mcp.core.config import Config
from squirrel_mcp.core.models import Revision
from squirrel_mcp.keys import crypto
from squirrel_mcp.plugins import hookspecs
from squirrel_mcp.plugins import manager as plugins
from squirrel_mcp.search.duplicates import Duplicate
from squirrel_mcp.search.ranking import MAX_NOTE_CHARS, Candidate, Progress, RankedHit, Ranking, RankOptions
from squirrel_mcp.server import searching
from squirrel_mcp.server.writing import save_with_duplicates
from squirrel_mcp.storage.local import LocalVault

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "plugins.md"
SECRET = "zebra-passphrase-query"  # a word that must never reach a log


@pytest.fixture
def store(tmp_path: Path) -> MemoryStore:
    cheap = crypto.KdfParams(salt=b"s" * crypto.SALT_BYTES, n=2**14)
    return MemoryStore.create(LocalVault(tmp_path / "v", create=True), "passphrase", kdf=cheap)


@pytest.fixture
def lines() -> list[str]:
    return []


@pytest.fixture
def pm() -> plugins.pluggy.PluginManager:
    return plugins.get_plugin_manager()


@pytest.fixture
def host(pm: plugins.pluggy.PluginManager, lines: list[str]) -> Iterator[plugins.PluginHost]:
    host = plugins.PluginHost(pm, log=lines.append, rank_timeout=0.5)
    try:
        yield host
    finally:
        host.shutdown(timeout=1)


@pytest.fixture
def register(pm: plugins.pluggy.PluginManager) -> Iterator[Callable[[object, str], None]]:
    """Register throwaway plugins by name; every one is unregistered afterwards."""
    registered: list[object] = []

    def add(plugin: object, name: str) -> None:
        pm.register(plugin, name=name)
        registered.append(plugin)

    try:
        yield add
    finally:
        for plugin in registered:
            if pm.is_registered(plugin):
                pm.unregister(plugin)


def config(tmp_path: Path) -> Config:
    return Config(tmp_path / "v", "the passphrase", None, "an api key", tmp_path / "cache")


def save(store: MemoryStore, text: str) -> Revision:
    return store.save(entity="user", text=text, category="fact", tags=[], keywords=[])


def wait_for(condition: Callable[[], bool]) -> None:
    # Generous: the hook runs on a worker thread, which a loaded machine may start late.
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def candidates_of(store: MemoryStore) -> list[Candidate]:
    memories = sorted(store.current(), key=lambda m: m.id)
    return [Candidate(m, float(len(memories) - i), 1.0 / (i + 1)) for i, m in enumerate(memories)]


def options(limit: int = 10, near_misses: bool = False) -> RankOptions:
    return RankOptions(limit, near_misses, None, (), datetime.now(UTC))


def rank(host: plugins.PluginHost, store: MemoryStore, **kwargs: Any) -> tuple[Ranking, list[Candidate]]:
    candidates = candidates_of(store)
    chosen = options(**kwargs)
    return host.rank(SECRET, candidates, len(candidates), chosen, MemoryReader(store).get), candidates


class Reverse:
    """A throwaway ranker: candidates weakest first."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, RankOptions]] = []

    @hookspecs.hookimpl
    def rank_memories(self, query: str, candidates: Sequence[Candidate], options: RankOptions) -> Ranking:
        self.calls.append((query, len(candidates), options))
        hits = [
            RankedHit(c.memory.id, float(n), c.lexical_score, 0.5)
            for n, c in zip(range(len(candidates), 0, -1), reversed(candidates), strict=True)
        ]
        return Ranking(hits[: options.limit], len(candidates), "hybrid")


# One test per hook: the meta-test below checks every hookspec has a test_hook_<name>.


def test_hook_startup(
    host: plugins.PluginHost,
    register: Callable[[object, str], None],
    store: MemoryStore,
    tmp_path: Path,
    lines: list[str],
) -> None:
    saved = save(store, "Plays the cello")
    seen: dict[str, Any] = {}
    release = threading.Event()

    class Starting(Reverse):
        @hookspecs.hookimpl
        def startup(self, config: Config, memories: MemoryReader, log: Callable[[str], None]) -> None:
            seen.update(config=config, current=memories.current(), log=log)
            log("model loading")
            # Slow start-up: host.start must return at once, and no ranking is asked meanwhile.
            release.wait(5)
            seen["done"] = True

    ranker = Starting()
    register(ranker, "starting")
    begun = time.monotonic()
    host.start(config(tmp_path), store)
    assert time.monotonic() - begun < 0.5
    wait_for(lambda: "log" in seen)
    assert seen["config"].passphrase is None and seen["config"].api_key is None
    assert seen["config"].vault_path == tmp_path / "v"
    assert seen["current"] == [saved]
    assert rank(host, store)[0].ranking == "lexical" and ranker.calls == []  # not started yet
    release.set()
    wait_for(lambda: "done" in seen)
    wait_for(lambda: rank(host, store)[0].ranking == "hybrid")
    assert lines == ["model loading"]
    assert not hasattr(MemoryReader(store), "save")


def test_hook_rank_memories(
    host: plugins.PluginHost, register: Callable[[object, str], None], store: MemoryStore, tmp_path: Path
) -> None:
    for text in ("one", "two", "three"):
        save(store, text)
    assert not host.has_rankers()
    lexical, candidates = rank(host, store, limit=2)
    assert lexical.ranking == "lexical" and lexical.total == 3
    assert [h.memory_id for h in lexical.hits] == [c.memory.id for c in candidates[:2]]
    assert all(h.semantic_score is None and not h.near_miss for h in lexical.hits)
    ranker = Reverse()
    register(ranker, "reverse")
    host.start(config(tmp_path), store)
    assert host.has_rankers()
    wait_for(lambda: rank(host, store, limit=2)[0].ranking == "hybrid")
    ranked, candidates = rank(host, store, limit=2)
    assert [h.memory_id for h in ranked.hits] == [c.memory.id for c in reversed(candidates)][:2]
    query, count, chosen = ranker.calls[-1]
    assert (query, count, chosen.limit, chosen.near_misses) == (SECRET, 3, 2, False)


def test_a_rankers_note_and_progress_reach_the_search_result(
    host: plugins.PluginHost, register: Callable[[object, str], None], store: MemoryStore, tmp_path: Path
) -> None:
    for text in ("one", "two"):
        save(store, text)
    note = "Half of the memories are ready so far."

    class Preparing(Reverse):
        @hookspecs.hookimpl
        def rank_memories(self, query: str, candidates: Sequence[Candidate], options: RankOptions) -> Ranking:
            answer = super().rank_memories(query, candidates, options)
            return dataclasses.replace(answer, note=note, progress=Progress(1, 2))

    register(Preparing(), "preparing")
    host.start(config(tmp_path), store)
    wait_for(lambda: rank(host, store)[0].ranking == "hybrid")
    heard: list[tuple[Progress, str | None]] = []
    now = datetime.now(UTC)
    result = searching.run_search(
        store, host, "one", limit=5, now=now, progress=lambda p, m: heard.append((p, m))
    )
    assert result.ranking == "hybrid" and result.note == note
    assert heard == [(Progress(1, 2), note)]
    # After the server's own note (a query no word of which can match).
    assert (
        searching.run_search(store, host, "?!", limit=5, now=now).note
        == f"{searching.MEANING_ONLY_NOTE} {note}"
    )
    # And a query of common words only: the ranker still ranked it, by meaning alone.
    assert (
        searching.run_search(store, host, "what is it", limit=5, now=now).note
        == f"{searching.STOPWORDS_MEANING_NOTE} {note}"
    )


def test_a_ranker_returning_none_defers_to_the_next_and_then_lexical(
    host: plugins.PluginHost, register: Callable[[object, str], None], store: MemoryStore, tmp_path: Path
) -> None:
    save(store, "one")
    asked: list[str] = []

    class Deferring:
        @hookspecs.hookimpl(tryfirst=True)
        def rank_memories(self) -> None:
            asked.append("deferring")

    register(Deferring(), "deferring")
    host.start(config(tmp_path), store)
    wait_for(lambda: rank(host, store)[0].ranking == "lexical" and bool(asked))
    register(Reverse(), "reverse")
    both = plugins.PluginHost(host.pm)
    try:
        both.start(config(tmp_path), store)
        asked.clear()
        # Each plugin starts in its own thread, so reverse may answer before deferring is
        # ready to be asked; wait until both take part.
        wait_for(lambda: rank(both, store)[0].ranking == "hybrid" and bool(asked))
    finally:
        both.shutdown()


def test_hook_memories_changed(
    host: plugins.PluginHost, register: Callable[[object, str], None], store: MemoryStore, tmp_path: Path
) -> None:
    told: list[tuple[str, int, str, bool]] = []

    class Watching:
        @hookspecs.hookimpl
        def memories_changed(self, revisions: Sequence[Revision]) -> None:
            told.extend((r.id, r.revision, r.change, r.deleted) for r in revisions)

    register(Watching(), "watching")
    before = save(store, "Known before start-up")
    host.start(config(tmp_path), store)
    saved = save(store, "Drinks oolong")
    store.update(saved.id, changes={"text": "Drinks sencha"}, reason=None)
    store.delete(saved.id, reason=None)
    store.restore(saved.id)
    # Another process's write is told too, once this server reads it.
    other = MemoryStore.unlock(LocalVault(tmp_path / "v", create=False), "passphrase")
    theirs = save(other, "Written elsewhere")
    store.refresh()
    expected = [
        (saved.id, 1, "created", False),
        (saved.id, 2, "corrected", False),
        (saved.id, 3, "deleted", True),
        (saved.id, 4, "restored", False),
        (theirs.id, 1, "created", False),
    ]
    wait_for(lambda: len(told) >= len(expected))
    assert told == expected and before.id not in {t[0] for t in told}
    host.shutdown()
    save(store, "After shutdown")
    time.sleep(0.05)
    assert len(told) == len(expected)


def test_hook_similar_memories(
    host: plugins.PluginHost,
    register: Callable[[object, str], None],
    store: MemoryStore,
    tmp_path: Path,
    lines: list[str],
) -> None:
    """save_memory names the memories a plugin finds close in meaning; a broken answer sets it aside."""
    asked: list[tuple[str, int]] = []
    answers: list[object] = []

    class Meaning:
        @hookspecs.hookimpl
        def similar_memories(self, memory: Revision, limit: int) -> object:
            asked.append((memory.id, limit))
            return answers.pop(0)

    def add(text: str) -> tuple[Revision, bool, list[Duplicate]]:
        return save_with_duplicates(
            store, entity="user", text=text, category="fact", tags=[], keywords=[], host=host
        )

    register(Meaning(), "meaning")
    # Nothing in common by words: only the plugin can name it.
    tulips = save(store, "Plants tulip bulbs every October")
    gone = save(store, "Old phone number 555-0100")
    store.delete(gone.id, reason=None)
    # Not started yet: not asked (a save never waits for a plugin).
    assert add("Autumn: puts flowers in the garden")[2] == [] and asked == []
    host.start(config(tmp_path), store)
    assert host.wait_started(30)
    answers.append([(tulips.id, 0.81)])
    saved, _, found = add("Every autumn, flowers go into the ground")
    assert asked == [(saved.id, 3)]
    assert [(d.memory.id, d.overlap, d.meaning) for d in found] == [(tulips.id, 0.0, 0.81)]
    # A deleted memory named: the answer is not used, and the plugin is set aside, in one line.
    answers.append([(gone.id, 0.9)])
    assert add("Sows poppies in the autumn too")[2] == [] and len(asked) == 2
    assert lines == [
        "plugin meaning failed in similar_memories (named an unknown id, a deleted memory or the "
        "memory itself); it is set aside for this session"
    ]
    add("Bulbs: tulips, daffodils")
    assert len(asked) == 2


def test_hook_shutdown(
    pm: plugins.pluggy.PluginManager,
    register: Callable[[object, str], None],
    store: MemoryStore,
    tmp_path: Path,
    lines: list[str],
) -> None:
    order: list[str] = []

    class Flushing:
        @hookspecs.hookimpl
        def memories_changed(self) -> None:
            order.append("changed")

        @hookspecs.hookimpl
        def shutdown(self) -> None:
            order.append("shutdown")

    class Stuck:
        @hookspecs.hookimpl
        def shutdown(self) -> None:
            time.sleep(30)

    register(Flushing(), "flushing")
    register(Stuck(), "stuck")
    host = plugins.PluginHost(pm, log=lines.append)
    host.start(config(tmp_path), store)
    save(store, "Last words")
    begun = time.monotonic()
    host.shutdown(timeout=0.5)
    # The stuck plugin costs the bound, not 30 s; the other flushed after its last change.
    assert time.monotonic() - begun < 15
    assert order == ["changed", "shutdown"]


def test_hook_register_commands(
    pm: plugins.pluggy.PluginManager,
    register: Callable[[object, str], None],
    capsys: pytest.CaptureFixture[str],
) -> None:
    from squirrel_mcp.cli import main

    class Greeter:
        @hookspecs.hookimpl
        def register_commands(self, commands: Any) -> None:
            hello = commands.add_parser("hello", help="says hello")
            hello.add_argument("--times", type=int, default=1)
            hello.set_defaults(run=lambda args: 40 + args.times)

    class Usurper:
        @hookspecs.hookimpl
        def register_commands(self, commands: Any) -> None:
            commands.add_parser("init")  # taken by the built-in command

    register(Greeter(), "greeter")
    register(Usurper(), "usurper")
    parser = main.build_parser(pm)
    args = parser.parse_args(["hello", "--times", "2"])
    assert args.run(args) == 42
    # The plugin that asked for a built-in name is left out, saying so; init is still the built-in.
    said = capsys.readouterr().err
    assert said == "squirrel-mcp: plugin usurper's commands were not added (ArgumentError)\n"
    assert getattr(parser.parse_args(["init"]), "run", None) is None


def test_hook_doctor_checks(
    pm: plugins.pluggy.PluginManager, register: Callable[[object, str], None], store: MemoryStore
) -> None:
    from squirrel_mcp.cli import doctor
    from squirrel_mcp.plugins.checks import Check

    seen: list[object] = []

    class Checker:
        @hookspecs.hookimpl
        def doctor_checks(self, config: Config, memories: MemoryReader | None) -> list[Check]:
            seen.append((config.passphrase, memories is not None and memories.account_id == store.account_id))
            return [Check("thing", True, "fine"), Check("other thing", False, "broken", "mend it")]

    class Crasher:
        @hookspecs.hookimpl
        def doctor_checks(self) -> list[Check]:
            raise ValueError("a bug")

    register(Checker(), "checker")
    register(Crasher(), "crasher")
    config = Config.from_env({"SQUIRREL_PASSPHRASE": "a secret"})
    lines = sorted(check.line() for check in doctor.plugin_checks(pm, config, store))
    assert lines == [
        "✓ thing: fine",
        "✗ other thing: broken → mend it",
        "✗ plugin crasher: its checks failed (ValueError)",
    ]
    # The plugin gets the account but never the passphrase.
    assert seen == [(None, True)]


def garbage(kind: str, candidates: Sequence[Candidate], limit: int) -> object:
    first = candidates[0]
    good = RankedHit(first.memory.id, 1.0, first.lexical_score)
    answers: dict[str, object] = {
        "not a Ranking": [good],
        "dict": {"hits": [], "total": 0, "ranking": "hybrid"},
        "unknown id": Ranking([RankedHit("0" * 16, 1.0, 0.0)], 1, "hybrid"),
        "id not a string": Ranking([RankedHit(7, 1.0, 0.0)], 1, "hybrid"),  # type: ignore[arg-type]
        "duplicate": Ranking([good, good], 1, "hybrid"),
        "nan score": Ranking([RankedHit(first.memory.id, math.nan, first.lexical_score)], 1, "hybrid"),
        "inf score": Ranking([RankedHit(first.memory.id, math.inf, first.lexical_score)], 1, "hybrid"),
        "string score": Ranking([RankedHit(first.memory.id, "1", first.lexical_score)], 1, "hybrid"),  # type: ignore[arg-type]
        "semantic above 1": Ranking([RankedHit(first.memory.id, 1.0, first.lexical_score, 2.0)], 1, "hybrid"),
        "nan semantic": Ranking(
            [RankedHit(first.memory.id, 1.0, first.lexical_score, math.nan)], 1, "hybrid"
        ),
        "wrong lexical": Ranking([RankedHit(first.memory.id, 1.0, 0.123)], 1, "hybrid"),
        "label": Ranking([good], 1, "semantic"),  # type: ignore[arg-type]
        "negative total": Ranking([good], -1, "hybrid"),
        "total below hits": Ranking([good], 0, "hybrid"),
        "over the limit": Ranking(
            [RankedHit(c.memory.id, 1.0, c.lexical_score) for c in candidates[: limit + 1]], 5, "hybrid"
        ),
        "out of order": Ranking(
            [RankedHit(c.memory.id, float(n), c.lexical_score) for n, c in enumerate(candidates[:2])],
            2,
            "hybrid",
        ),
        "unasked near miss": Ranking(
            [good, RankedHit(candidates[1].memory.id, 0.5, 0.5, None, True)], 1, "hybrid"
        ),
        "near-miss flag": Ranking(
            [RankedHit(first.memory.id, 1.0, first.lexical_score, None, 1)], 1, "hybrid"
        ),  # type: ignore[arg-type]
        "long note": Ranking([good], 1, "hybrid", note="x" * (MAX_NOTE_CHARS + 1)),
        "empty note": Ranking([good], 1, "hybrid", note=""),
        "progress past its total": Ranking([good], 1, "hybrid", progress=Progress(3, 2)),
        "progress not a Progress": Ranking([good], 1, "hybrid", progress=(1, 2)),  # type: ignore[arg-type]
    }
    return answers[kind]


GARBAGE = [
    "not a Ranking",
    "dict",
    "unknown id",
    "id not a string",
    "duplicate",
    "nan score",
    "inf score",
    "string score",
    "semantic above 1",
    "nan semantic",
    "wrong lexical",
    "label",
    "negative total",
    "total below hits",
    "over the limit",
    "out of order",
    "unasked near miss",
    "near-miss flag",
    "long note",
    "empty note",
    "progress past its total",
    "progress not a Progress",
]


@pytest.mark.parametrize("kind", ["raises", "hangs", *GARBAGE])
def test_a_failing_ranker_leaves_lexical_search_and_one_line(
    kind: str,
    host: plugins.PluginHost,
    register: Callable[[object, str], None],
    store: MemoryStore,
    tmp_path: Path,
    lines: list[str],
) -> None:
    for text in ("quetzal", "ocelot", "tapir"):
        save(store, text)
    calls: list[int] = []

    class Broken:
        @hookspecs.hookimpl
        def rank_memories(self, query: str, candidates: Sequence[Candidate], options: RankOptions) -> object:
            calls.append(1)
            if kind == "raises":
                raise ValueError(f"cannot rank {query}: {candidates[0].memory.text}")
            if kind == "hangs":
                time.sleep(3)
            return garbage(kind, candidates, options.limit)

    register(Broken(), "broken")
    host.start(config(tmp_path), store)
    wait_for(lambda: len(rank(host, store, limit=2)[0].hits) == 2 and bool(calls))
    assert len(lines) == 1, lines
    assert lines[0].startswith("plugin broken failed in rank_memories (")
    assert SECRET not in lines[0] and not any(t in lines[0] for t in ("quetzal", "ocelot", "tapir"))
    ranked, candidates = rank(host, store, limit=2)
    assert ranked.ranking == "lexical"
    assert [h.memory_id for h in ranked.hits] == [c.memory.id for c in candidates[:2]]
    # Set aside for the session: not asked again, no second line.
    assert len(calls) == 1 and len(lines) == 1
    assert not host.has_rankers()


def test_a_plugin_failing_at_startup_is_set_aside(
    host: plugins.PluginHost, register: Callable[[object, str], None], store: MemoryStore, tmp_path: Path
) -> None:
    save(store, "one")

    class Failing(Reverse):
        @hookspecs.hookimpl
        def startup(self) -> None:
            raise RuntimeError(SECRET)

    ranker = Failing()
    register(ranker, "failing")
    lines: list[str] = []
    host._log = lines.append
    host.start(config(tmp_path), store)
    wait_for(lambda: bool(lines))
    assert lines == ["plugin failing failed in startup (RuntimeError); it is set aside for this session"]
    assert rank(host, store)[0].ranking == "lexical" and ranker.calls == []


# Loading: entry points, SQUIRREL_MCP_PLUGINS, tracing.


def fake_distribution(where: Path, name: str, module: str, source: str) -> None:
    """An installed distribution as importlib.metadata sees one: a dist-info folder and a module."""
    (where / f"{module}.py").write_text(source)
    info = where / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[squirrel_mcp]\n{name} = {module}\n")


RANKER_SOURCE = """
from squirrel_mcp.plugins.hookspecs import hookimpl

@hookimpl
def startup(log):
    pass

@hookimpl
def rank_memories():
    return None
"""


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "site"
    where.mkdir()
    fake_distribution(where, "first", "first_ranker", RANKER_SOURCE)
    fake_distribution(where, "second", "second_ranker", RANKER_SOURCE)
    fake_distribution(where, "broken", "broken_ranker", "raise ImportError('no model here')\n")
    fake_distribution(
        where, "misspelled", "misspelled_ranker", RANKER_SOURCE.replace("rank_memories", "rank_memory")
    )
    monkeypatch.syspath_prepend(str(where))
    return where


def names(pm: plugins.pluggy.PluginManager) -> set[str]:
    return {name for name, _ in pm.list_name_plugin()}


@pytest.mark.parametrize(
    ("listed", "loaded", "logged"),
    [
        (None, {"lexical", "first", "second"}, ["plugin broken was not loaded (ImportError)", "misspelled"]),
        ("", {"lexical"}, []),
        (
            "second, nothere",
            {"lexical", "second"},
            ["plugin nothere named in SQUIRREL_MCP_PLUGINS is not loaded"],
        ),
    ],
)
def test_squirrel_mcp_plugins_names_what_loads(
    installed: Path, listed: str | None, loaded: set[str], logged: list[str]
) -> None:
    pm = plugins.get_plugin_manager()
    lines: list[str] = []
    plugins.load_plugins(pm, {} if listed is None else {plugins.PLUGINS_ENV: listed}, log=lines.append)
    # squirrel-mcp-embeddings is installed in the test environment too; these fakes are the subject.
    assert names(pm) - {"embeddings"} == loaded
    assert len(lines) == len(logged)
    for expected in logged:
        assert [line for line in lines if expected in line]
    pm.check_pending()


def test_trace_names_hooks_and_shapes_never_text(
    installed: Path, store: MemoryStore, tmp_path: Path, lines: list[str]
) -> None:
    pm = plugins.get_plugin_manager()
    plugins.load_plugins(pm, {plugins.PLUGINS_ENV: "first", plugins.TRACE_ENV: "1"}, log=lines.append)
    save(store, f"The secret is {SECRET}")
    host = plugins.PluginHost(pm, log=lines.append)
    try:
        host.start(config(tmp_path), store)
        wait_for(lambda: rank(host, store)[0].ranking == "lexical" and len(lines) >= 4)
    finally:
        host.shutdown()
    assert (
        "hook startup(config=Config, memories=MemoryReader, log=builtin_function_or_method, "
        "notice=function) -> [first]" in lines
    )
    assert (
        "hook rank_memories(query=str, candidates=list[1], total=int, options=RankOptions) -> [first]"
        in lines
    )
    assert "hook rank_memories returned NoneType" in lines
    assert "hook rank_memories returned Ranking[1 hits, lexical]" in lines
    assert not [line for line in lines if SECRET in line or "passphrase" in line]


# Meta-tests, like datasette's: the contract is tested, documented and honest.


def hook_specs() -> dict[str, Callable[..., Any]]:
    pm = plugins.get_plugin_manager()
    return {
        name: getattr(hookspecs, name)
        for name in dir(hookspecs)
        if pm.parse_hookspec_opts(hookspecs, name) is not None
    }


def signature(function: Callable[..., Any]) -> str:
    spec = inspect.signature(function)
    arguments = ", ".join(f"{p.name}: {p.annotation}" for p in spec.parameters.values())
    return f"def {function.__name__}({arguments}) -> {spec.return_annotation}"


def test_the_hooks_are_the_documented_ones() -> None:
    assert set(hook_specs()) == {
        "startup",
        "rank_memories",
        "memories_changed",
        "similar_memories",
        "shutdown",
        "register_commands",
        "doctor_checks",
    }


@pytest.mark.parametrize("name", sorted(hook_specs()))
def test_every_hook_has_a_test(name: str) -> None:
    assert callable(globals().get(f"test_hook_{name}")), f"no test_hook_{name}"


@pytest.mark.parametrize("name", sorted(hook_specs()))
def test_every_hook_is_documented_with_its_signature(name: str) -> None:
    docs = DOCS.read_text()
    section = re.search(rf"^### {name}\n(.*?)(?=^##)", docs, re.MULTILINE | re.DOTALL)
    assert section is not None, f"docs/plugins.md has no '### {name}' section"
    assert signature(hook_specs()[name]) in section.group(1)
    for word in ("Called", "None"):
        assert word in section.group(1), f"the {name} section does not say {word!r}"


@pytest.mark.parametrize("name", sorted(hook_specs()))
def test_every_hookspec_docstring_says_when_and_what_none_means(name: str) -> None:
    doc = inspect.getdoc(hook_specs()[name]) or ""
    assert doc.startswith("Called") and "None" in doc and "Exists so" in doc
    for argument in inspect.signature(hook_specs()[name]).parameters:
        assert f"`{argument}`" in doc, f"{name}'s docstring does not describe {argument}"


def test_check_pending_passes_with_every_shipped_plugin() -> None:
    pm = plugins.get_plugin_manager()
    plugins.load_plugins(pm, {}, log=pytest.fail)
    pm.check_pending()


def test_the_example_ranker_implements_only_real_hooks() -> None:
    import importlib.util

    path = ROOT / "docs" / "examples" / "squirrel-mcp-reverse-ranker" / "squirrel_mcp_reverse_ranker.py"
    spec = importlib.util.spec_from_file_location("squirrel_mcp_reverse_ranker", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    pm = plugins.get_plugin_manager()
    pm.register(module, name="reverse")
    try:
        pm.check_pending()
    finally:
        pm.unregister(module)
