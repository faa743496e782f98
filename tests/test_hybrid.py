"""The embeddings plugin without the model: the fused order's promises, the recipe, the vector file.

The fused order is checked as properties (hypothesis) of how hybrid search ranks
(docs/hybrid.md). The plugin's state (warm-up, re-embedding, the encrypted file) runs on a
real vault with a stand-in model that counts what it embeds.
"""

from __future__ import annotations

import hashlib
import math
import os
import stat
import sys
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from squirrel_mcp.book.memories import MemoryStore
from squirrel_mcp.book.reader import MemoryReader
from squirrel_mcp.core.models import Revision
from squirrel_mcp.keys import crypto
from squirrel_mcp.plugin_api import Progress, age_days
from squirrel_mcp.search.bm25 import decay
from squirrel_mcp.search.ranking import Candidate, Ranking, RankOptions, check_ranking
from squirrel_mcp.storage.local import LocalVault
from squirrel_mcp_embeddings import fusion, ranker, vectors, warmup
from squirrel_mcp_embeddings.fusion import EVERY_WORD, fuse, fused_score

FLOOR, SPAN = 0.35, 0.05
DIMENSIONS = 8

# Fusion as properties ---------------------------------------------------------

lexical_scores = st.sampled_from([0.0, 0.25, 1 / 3, 0.5, 2 / 3, 1.0])
cosines = st.floats(-1.0, 1.0, allow_nan=False)
decays = st.sampled_from([1.0, 0.5, 0.25, 0.1])


@st.composite
def pools(draw: st.DrawFn) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """Word matches (lexicalScore), cosines (some memories without a vector), decays."""
    n = draw(st.integers(1, 25))
    ids = [f"{i:016x}" for i in range(n)]
    lexical = {i: draw(lexical_scores) for i in ids if draw(st.booleans())}
    cos = {i: draw(cosines) for i in ids if draw(st.integers(0, 4)) > 0}
    dec = {i: draw(decays) for i in ids}
    return lexical, cos, dec


def ranked(pool: tuple[dict[str, float], dict[str, float], dict[str, float]], **kwargs: float) -> list:
    lexical, cos, dec = pool
    hits, _ = fuse(lexical, cos, dec, floor=FLOOR, span=SPAN, limit=100, **kwargs)  # type: ignore[arg-type]
    return hits


@settings(max_examples=300, deadline=None)
@given(pools())
def test_score_never_rises_down_the_list(pool: tuple) -> None:
    scores = [hit.score for hit in ranked(pool)]
    assert scores == sorted(scores, reverse=True)
    assert all(0 <= score <= 1 for score in scores)


@settings(max_examples=300, deadline=None)
@given(pools())
def test_every_word_hits_come_first_and_members_are_words_or_meaning(pool: tuple) -> None:
    lexical, cos, _ = pool
    hits = ranked(pool)
    full = [fusion.every_word(hit.lexical_score) for hit in hits]
    assert full == sorted(full, reverse=True)
    assert all((hit.score >= EVERY_WORD) == every for hit, every in zip(hits, full, strict=True))
    expected = set(lexical) | {i for i, c in cos.items() if c >= FLOOR}
    assert {hit.memory_id for hit in hits} == expected
    # semanticScore is the cosine for every hit with a vector, also below the floor.
    assert all(hit.semantic_score == cos.get(hit.memory_id) for hit in hits)


@settings(max_examples=300, deadline=None)
@given(pools())
def test_dominance_on_both_scores_ranks_first(pool: tuple) -> None:
    _, _, dec = pool
    hits = ranked(pool)
    position = {hit.memory_id: n for n, hit in enumerate(hits)}
    for a in hits:
        for b in hits:
            same_side = fusion.every_word(a.lexical_score) == fusion.every_word(b.lexical_score)
            if not same_side or dec[a.memory_id] != dec[b.memory_id]:
                continue
            sa = -2.0 if a.semantic_score is None else a.semantic_score
            sb = -2.0 if b.semantic_score is None else b.semantic_score
            if (
                a.lexical_score >= b.lexical_score
                and sa >= sb
                and (a.lexical_score > b.lexical_score or sa > sb)
            ):
                assert position[a.memory_id] < position[b.memory_id]


@settings(max_examples=200, deadline=None)
@given(st.lists(cosines, min_size=2, max_size=10), lexical_scores)
def test_ties_go_to_the_higher_cosine(cos_values: list[float], lexical_score: float) -> None:
    # Every cosine at or above floor + span: the same semantic part, so the same score.
    cos = {f"{i:016x}": FLOOR + SPAN + (1 - FLOOR - SPAN) * abs(c) for i, c in enumerate(cos_values)}
    lexical = dict.fromkeys(cos, lexical_score)
    hits, _ = fuse(lexical, cos, {}, floor=FLOOR, span=SPAN, limit=100)
    assert len({hit.score for hit in hits}) == 1
    assert [hit.semantic_score for hit in hits] == sorted(cos.values(), reverse=True)


@settings(max_examples=300, deadline=None)
@given(lexical_scores, cosines, decays, decays)
def test_age_fades_only_the_meaning_part(lexical_score: float, cosine: float, old: float, new: float) -> None:
    assume(old < new)
    fresh = fused_score(lexical_score, cosine, new, FLOOR, SPAN)
    aged = fused_score(lexical_score, cosine, old, FLOOR, SPAN)
    assert aged <= fresh
    # The word part stays whatever the age: with no meaning part, age changes nothing.
    assert fused_score(lexical_score, FLOOR - 0.1, old, FLOOR, SPAN) == fused_score(
        lexical_score, FLOOR - 0.1, new, FLOOR, SPAN
    )
    assert aged >= (EVERY_WORD if fusion.every_word(lexical_score) else 0) + 0.3 * lexical_score / 2 - 1e-12


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([0.0, 0.25, 1 / 3, 0.5, 1.0 - 1e-9, 1.0 - 2e-9, 1.0]),
            st.one_of(
                st.none(),
                cosines,
                st.sampled_from([FLOOR, FLOOR + SPAN, np.nextafter(FLOOR, 1), np.nextafter(FLOOR + SPAN, 0)]),
            ),
            st.floats(0.0, 1.0),
        ),
        min_size=1,
        max_size=40,
    )
)
def test_the_array_scores_are_the_scalar_formula_bit_for_bit(members: list[tuple]) -> None:
    lexical = np.array([m[0] for m in members])
    cos = np.array([np.nan if m[1] is None else m[1] for m in members])
    dec = np.array([m[2] for m in members])
    scores = fusion.fused_scores(lexical, cos, dec, FLOOR, SPAN)
    assert scores.tolist() == [fused_score(m[0], m[1], m[2], FLOOR, SPAN) for m in members]


@settings(max_examples=300, deadline=None)
@given(pools(), st.integers(1, 30))
def test_the_first_hits_are_those_of_a_full_sort(pool: tuple, limit: int) -> None:
    """Sorting only the members scoring at least the limit-th best gives the hits a full sort gives.

    The full sort is by score, then cosine, then the lexical order, then the id.
    """
    lexical, cos, dec = pool
    order = sorted(lexical, reverse=True)
    hits, count = fuse(lexical, cos, dec, floor=FLOOR, span=SPAN, limit=limit, order=order)
    members = set(lexical) | {memory_id for memory_id, cosine in cos.items() if cosine >= FLOOR}
    assert count == len(members)
    scored = [
        (fused_score(lexical.get(i, 0.0), cos.get(i), dec.get(i, 1.0), FLOOR, SPAN), cos.get(i), i)
        for i in members
    ]

    def key(entry: tuple[float, float | None, str]) -> tuple[float, float, int, str]:
        score, cosine, memory_id = entry
        words = order.index(memory_id) if memory_id in order else len(order)
        return -score, -(cosine if cosine is not None else -2.0), words, memory_id

    scored.sort(key=key)
    expected = [(memory_id, score, cosine) for score, cosine, memory_id in scored[:limit]]
    assert [(hit.memory_id, hit.score, hit.semantic_score) for hit in hits] == expected


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.datetimes(datetime(2000, 1, 1), datetime(2030, 1, 1), timezones=st.just(UTC)),
            st.sampled_from(["seconds", "milliseconds", "microseconds", "+02:00"]),
        ),
        min_size=1,
        max_size=20,
    ),
    st.datetimes(datetime(2020, 1, 1), datetime(2030, 1, 1), timezones=st.just(UTC)),
)
def test_whole_days_are_those_of_age_days(stamps: list[tuple[datetime, str]], now: datetime) -> None:
    """Read by numpy or, for a stamp in another zone, by age_days: the same integers."""
    memories = []
    for n, (when, form) in enumerate(stamps):
        if form == "+02:00":
            text = when.astimezone(timezone(timedelta(hours=2))).isoformat()
        else:
            text = when.isoformat(timespec=form).replace("+00:00", "Z")  # type: ignore[arg-type]
        memories.append(
            Revision.model_validate(
                {
                    "id": f"{n:016x}",
                    "entity": "user",
                    "text": "x",
                    "category": "note",
                    "createdAt": text,
                    "updatedAt": text,
                    "revision": 1,
                    "change": "created",
                }
            )
        )
    assert ranker._whole_days(memories, now) == [math.floor(age_days(memory, now)) for memory in memories]


def test_the_semantic_part_is_linear_from_floor_to_floor_plus_span() -> None:
    assert fusion.semantic_part(None, FLOOR, SPAN) == 0
    assert fusion.semantic_part(FLOOR, FLOOR, SPAN) == 0
    assert fusion.semantic_part(FLOOR + SPAN / 2, FLOOR, SPAN) == pytest.approx(0.5)
    assert fusion.semantic_part(FLOOR + SPAN, FLOOR, SPAN) == pytest.approx(1)
    assert fusion.semantic_part(0.99, FLOOR, SPAN) == 1
    # The spec's numbers: 0.3 × lexical + 0.7 × part × decay, halved, +0.5 with every word.
    assert fused_score(1.0, 0.99, 1.0, FLOOR, SPAN) == pytest.approx(1.0)
    assert fused_score(0.5, 0.99, 0.5, FLOOR, SPAN) == pytest.approx((0.15 + 0.35) / 2)
    assert fused_score(0.0, None, 1.0, FLOOR, SPAN) == 0


@settings(max_examples=100, deadline=None)
@given(pools())
def test_near_misses_are_the_closest_non_members_after_the_matches(pool: tuple) -> None:
    lexical, cos, dec = pool
    hits, members = fuse(lexical, cos, dec, floor=FLOOR, span=SPAN, limit=100, near_misses=3)
    matches = [hit for hit in hits if not hit.near_miss]
    misses = [hit for hit in hits if hit.near_miss]
    assert hits == matches + misses and len(matches) == members
    outside = sorted((c for i, c in cos.items() if i not in lexical and c < FLOOR), reverse=True)
    assert [hit.semantic_score for hit in misses] == outside[:3]
    assert all(hit.score == 0 and hit.lexical_score == 0 for hit in misses)


# The recipe --------------------------------------------------------------------


def memory(
    text: str, *, entity: str = "user", tags: Sequence[str] = (), keywords: Sequence[str] = ()
) -> Revision:
    return Revision(
        id="00000000000000aa",
        entity=entity,
        text=text,
        tags=list(tags),
        keywords=list(keywords),
        category="fact",
        createdAt="2026-01-01T00:00:00Z",
        updatedAt="2026-01-01T00:00:00Z",
        revision=1,
        change="created",
    )


def test_recipe_is_entity_text_tags_keywords() -> None:
    assert warmup.recipe(memory("Is allergic to peanuts")) == "user: Is allergic to peanuts"
    assert (
        warmup.recipe(memory("Runs Pi-hole", entity="home network", tags=["dns"], keywords=["ads", "pihole"]))
        == "home network: Runs Pi-hole (dns, ads, pihole)"
    )
    assert warmup.recipe(memory("x", keywords=["k"])) == "user: x (k)"


# The plugin on a real vault, with a stand-in model ----------------------------


class CountingModel:
    """Unit vectors from a text's hash; counts the texts it embedded."""

    def __init__(self, *, fail: bool = False, seconds_per_batch: float = 0.0) -> None:
        self.texts: list[str] = []
        self.fail = fail
        self.clock = 0.0
        self.seconds_per_batch = seconds_per_batch

    def embed(self, texts: Sequence[str]) -> vectors.Matrix:
        if self.fail:
            raise RuntimeError("the runtime broke")
        self.texts += texts
        self.clock += self.seconds_per_batch
        rows = []
        for text in texts:
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
            row = np.random.default_rng(seed).standard_normal(DIMENSIONS).astype(np.float32)
            rows.append(row / np.linalg.norm(row))
        return np.array(rows, dtype=np.float32).reshape(len(texts), DIMENSIONS)

    def fits(self, text: str) -> bool:
        # The stand-in's window holds any text: passages are tested with the real model.
        return True

    def token_offsets(self, text: str) -> list[tuple[int, int]]:
        raise AssertionError("a text that fits is not cut")


STAMP = vectors.Stamp("stand-in", "0" * 64, warmup.RECIPE_VERSION, DIMENSIONS)


@pytest.fixture
def store(tmp_path: Path) -> MemoryStore:
    cheap = crypto.KdfParams(salt=b"s" * crypto.SALT_BYTES, n=2**14)
    return MemoryStore.create(LocalVault(tmp_path / "v", create=True), "passphrase", kdf=cheap)


def warmed(hybrid: ranker.Hybrid) -> ranker.Hybrid:
    """Every memory embedded and the file written."""
    hybrid.warm_all()
    hybrid.flush()
    return hybrid


class Flushing(ranker.Hybrid):
    """The plugin's Hybrid, waiting after each search until the vector file is written."""

    def rank(self, *args: Any, **kwargs: Any) -> Ranking | None:
        answer = super().rank(*args, **kwargs)
        self.flush()
        return answer


def open_hybrid(
    store: MemoryStore, path: Path, model: CountingModel, lines: list[str], **kwargs: object
) -> ranker.Hybrid:
    hybrid = Flushing(
        model,
        MemoryReader(store),
        lines.append,
        stamp=kwargs.pop("stamp", STAMP),  # type: ignore[arg-type]
        floor=-1.0,
        span=0.5,
        path=path,
        clock=lambda: model.clock,
        # One warm-up thread, as on this suite's two-core machines, whatever the machine it runs on.
        threads=kwargs.pop("threads", 1),  # type: ignore[arg-type]
        **kwargs,  # type: ignore[arg-type]
    )
    store.listeners.append(hybrid.changed)
    return hybrid


def options(limit: int = 10) -> RankOptions:
    return RankOptions(limit, False, None, (), datetime.now(UTC))


def save_many(store: MemoryStore, n: int) -> list[Revision]:
    return [
        store.save(entity="user", text=f"memory number {i}", category="fact", tags=[], keywords=[])
        for i in range(n)
    ]


def test_the_vector_file_is_sealed_owner_only_and_survives_a_restart(
    store: MemoryStore, tmp_path: Path
) -> None:
    saved = save_many(store, 5)
    path = tmp_path / "cache" / "squirrel-notes" / f"memory-vectors-{store.account_id}.bin"
    model, lines = CountingModel(), []
    hybrid = open_hybrid(store, path, model, lines)
    hybrid.warm_all()
    answer = hybrid.rank("anything", [], 0, options())
    assert answer is not None and answer.ranking == "hybrid" and len(model.texts) == 5 + 1
    data = path.read_bytes()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    for revision in saved:
        assert revision.text.encode() not in data and revision.id.encode() not in data
        # No raw vector bytes: not one row, not even its first half.
        assert hybrid.table.vector(revision.id)[: DIMENSIONS // 2].tobytes() not in data
    assert STAMP.model.encode() not in data
    # A restart reads the file: nothing is embedded again but the query.
    again = CountingModel()
    restarted = open_hybrid(store, path, again, [])
    assert len(restarted.table) == 5 and not restarted.pending
    restarted.rank("anything", [], 0, options())
    assert again.texts == ["anything"]
    assert lines == []


def test_a_tampered_or_foreign_file_is_discarded_and_rebuilt(store: MemoryStore, tmp_path: Path) -> None:
    save_many(store, 3)
    path = tmp_path / "vectors.bin"
    warmed(open_hybrid(store, path, CountingModel(), []))
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 1
    path.write_bytes(bytes(data))
    model, lines = CountingModel(), []
    hybrid = open_hybrid(store, path, model, lines)
    assert lines == [warmup.REBUILT] and len(hybrid.pending) == 3
    warmed(hybrid)
    assert len(model.texts) == 3
    # Rebuilt: the next start reads it without a line.
    quiet: list[str] = []
    assert len(open_hybrid(store, path, CountingModel(), quiet).table) == 3 and quiet == []
    # Garbage, or another account's key, are refused the same way.
    path.write_bytes(b"not a vector file")
    assert open_hybrid(store, path, CountingModel(), noisy := []).pending and noisy == [warmup.REBUILT]


def test_a_new_model_manifest_or_recipe_embeds_everything_again(store: MemoryStore, tmp_path: Path) -> None:
    save_many(store, 4)
    path = tmp_path / "vectors.bin"
    warmed(open_hybrid(store, path, CountingModel(), []))
    for changed in (
        vectors.Stamp("another model", STAMP.manifest_sha256, STAMP.recipe, DIMENSIONS),
        vectors.Stamp(STAMP.model, "1" * 64, STAMP.recipe, DIMENSIONS),
        vectors.Stamp(STAMP.model, STAMP.manifest_sha256, STAMP.recipe + 1, DIMENSIONS),
    ):
        lines: list[str] = []
        hybrid = open_hybrid(store, path, CountingModel(), lines, stamp=changed)
        assert len(hybrid.table) == 0 and len(hybrid.pending) == 4 and lines == []


def test_changing_a_memory_re_embeds_only_that_memory(store: MemoryStore, tmp_path: Path) -> None:
    saved = save_many(store, 6)
    path = tmp_path / "vectors.bin"
    model = CountingModel()
    hybrid = open_hybrid(store, path, model, [])
    warmed(hybrid)
    model.texts.clear()
    store.update(saved[2].id, changes={"keywords": ["lunch"]}, reason="more words")
    store.delete(saved[4].id, reason=None)
    hybrid.warm_all()
    answer = hybrid.rank("q", [], 0, options())
    assert model.texts == ["user: memory number 2 (lunch)", "q"]
    assert answer is not None and saved[4].id not in {hit.memory_id for hit in answer.hits}
    assert len(hybrid.table) == 5
    # And the file, read at the next start, holds the new revision.
    restarted = open_hybrid(store, path, CountingModel(), [])
    assert restarted.table.revision(saved[2].id) == 2 and saved[4].id not in restarted.table


def test_a_search_during_the_warm_up_embeds_only_its_query_and_says_how_far(
    store: MemoryStore, tmp_path: Path
) -> None:
    saved = save_many(store, 40)
    model = CountingModel()
    hybrid = open_hybrid(store, tmp_path / "v.bin", model, [])
    # Half embedded (as by the warm-up thread), the word match among the other half.
    hybrid.table.put_many(
        ((m.id, m.revision) for m in saved[:20]), model.embed([warmup.recipe(m) for m in saved[:20]])
    )
    for m in saved[:20]:
        del hybrid.pending[m.id]
    model.texts.clear()
    late = store.index.memory(saved[30].id)
    assert late is not None
    answer = hybrid.rank("memory", [Candidate(late, 1.0, 0.5)], 1, options(limit=50))
    assert answer is not None and answer.ranking == "hybrid"
    assert model.texts == ["memory"]
    # Meaning over the 20 embedded (floor -1: every one a member), the word match by words only.
    by_id = {hit.memory_id: hit for hit in answer.hits}
    assert {m.id for m in saved[:20]} | {late.id} == set(by_id)
    assert by_id[late.id].semantic_score is None and by_id[late.id].score <= 0.3 / 2
    assert answer.progress == Progress(20, 40)
    assert answer.note is not None and "20 of 40 memories are searchable by meaning" in answer.note
    assert (
        check_ranking(answer, [Candidate(late, 1.0, 0.5)], options(limit=50), MemoryReader(store).get) is None
    )
    # The word match is embedded next.
    assert hybrid._queue[0] == late.id
    hybrid.warm_all()
    done = hybrid.rank("memory", [Candidate(late, 1.0, 0.5)], 1, options(limit=50))
    assert done is not None and done.note is None and done.progress is None
    assert {hit.memory_id: hit for hit in done.hits}[late.id].semantic_score is not None


def test_the_warm_up_thread_embeds_everything_and_writes_the_file(store: MemoryStore, tmp_path: Path) -> None:
    saved = save_many(store, 50)
    path = tmp_path / "v.bin"
    model = CountingModel()
    hybrid = open_hybrid(store, path, model, [])
    hybrid.start_warm_up()
    hybrid.warm_all()  # returns once nothing is pending, whichever thread embedded what
    assert not hybrid.pending and len(hybrid.table) == 50
    assert sorted(model.texts) == sorted(warmup.recipe(m) for m in saved)
    # A change later is embedded by the thread without a search.
    store.update(saved[3].id, changes={"keywords": ["tea"]}, reason=None)
    hybrid.warm_all()
    assert hybrid.table.revision(saved[3].id) == 2
    hybrid.stop_warm_up()
    assert hybrid._warmers and not any(warmer.is_alive() for warmer in hybrid._warmers)
    hybrid.flush()
    assert len(open_hybrid(store, path, CountingModel(), []).table) == 50


def test_the_warm_up_uses_half_the_cores_it_may_run_on(monkeypatch: pytest.MonkeyPatch) -> None:
    assert [warmup.warm_up_threads(cores) for cores in (1, 2, 3, 4, 8, 16)] == [1, 1, 1, 2, 4, 8]
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(6)), raising=False)
    assert warmup.warm_up_threads() == 3


def test_warm_up_threads_side_by_side_embed_every_memory_once(store: MemoryStore, tmp_path: Path) -> None:
    saved = save_many(store, 120)
    together = threading.Barrier(3, timeout=60)
    threads_seen: set[int] = set()

    class SideBySide(CountingModel):
        def embed(self, texts: Sequence[str]) -> vectors.Matrix:
            if threading.get_ident() not in threads_seen:
                threads_seen.add(threading.get_ident())
                # Each warm-up thread's first batch waits for the other two: all three embed at once.
                together.wait()
            return super().embed(texts)

    model = SideBySide()
    hybrid = open_hybrid(store, tmp_path / "v.bin", model, [], threads=3)
    hybrid.start_warm_up()
    deadline = time.monotonic() + 120
    while (hybrid.pending or hybrid._in_flight) and time.monotonic() < deadline:
        time.sleep(0.01)
    hybrid.stop_warm_up()
    assert len(hybrid._warmers) == 3 and len(threads_seen) == 3
    assert not hybrid.pending and len(hybrid.table) == 120
    # Every memory embedded exactly once, whichever thread took it.
    assert sorted(model.texts) == sorted(warmup.recipe(m) for m in saved)


@pytest.mark.skipif(sys.platform != "linux", reason="per-thread priority is Linux's")
def test_the_warm_up_thread_runs_below_the_searches_priority(store: MemoryStore, tmp_path: Path) -> None:
    save_many(store, 20)
    seen: list[tuple[str, int]] = []

    class Watching(CountingModel):
        def embed(self, texts: Sequence[str]) -> vectors.Matrix:
            # On Linux, who=0 is the calling thread.
            seen.append((threading.current_thread().name, os.getpriority(os.PRIO_PROCESS, 0)))
            return super().embed(texts)

    hybrid = open_hybrid(store, tmp_path / "v.bin", Watching(), [])
    base = os.getpriority(os.PRIO_PROCESS, 0)
    if base + warmup.WARM_UP_NICE > 19:
        pytest.skip("this test already runs at a priority too low to go lower by WARM_UP_NICE")
    hybrid.start_warm_up()
    deadline = time.monotonic() + 60
    while hybrid.pending and time.monotonic() < deadline:
        time.sleep(0.01)
    hybrid.stop_warm_up()
    assert not hybrid.pending
    assert seen and {name for name, _ in seen} == {"squirrel-mcp-warm-up"}
    assert {nice for _, nice in seen} == {base + warmup.WARM_UP_NICE}
    # The searches' threads keep theirs.
    assert os.getpriority(os.PRIO_PROCESS, 0) == base


def test_a_memory_changed_while_embedded_is_embedded_again(store: MemoryStore, tmp_path: Path) -> None:
    saved = save_many(store, 3)
    model = CountingModel()
    hybrid = open_hybrid(store, tmp_path / "v.bin", model, [])
    with hybrid._lock:
        batch = hybrid._next_batch()
    made = warmup.embed_memories(model, batch)
    store.update(saved[1].id, changes={"text": "changed meanwhile"}, reason=None)
    with hybrid._lock:
        hybrid._store(batch, made)
    assert list(hybrid.pending) == [saved[1].id] and saved[1].id not in hybrid.table
    hybrid.warm_all()
    assert hybrid.table.revision(saved[1].id) == 2 and model.texts[-1] == "user: changed meanwhile"


def test_the_note_estimates_the_time_left_from_the_pace_so_far() -> None:
    assert ranker._duration(0.2) == "1 s" and ranker._duration(42) == "42 s"
    assert ranker._duration(600) == "10 min" and ranker._duration(4 * 3600) == "4.0 h"


def test_a_search_that_finds_another_busy_answers_by_words_within_the_bound_saying_so(
    store: MemoryStore, tmp_path: Path
) -> None:
    saved = save_many(store, 2)
    hybrid = open_hybrid(store, tmp_path / "v.bin", CountingModel(), [])
    candidates = [Candidate(saved[1], 2.0, 1.0), Candidate(saved[0], 1.0, 0.5)]
    with hybrid._lock:
        began = time.monotonic()
        # The plugin's own rank (Flushing's would wait for the file, under the lock held here).
        answer = ranker.Hybrid.rank(hybrid, "q", candidates, 2, options(limit=1))
        assert time.monotonic() - began < ranker.LOCK_WAIT + 1
    # The word order, cut to the limit, with a note: an agent knows to search again.
    assert answer is not None and answer.ranking == "lexical" and answer.note == ranker.BUSY
    assert [hit.memory_id for hit in answer.hits] == [saved[1].id] and answer.total == 2
    assert check_ranking(answer, candidates, options(limit=1), MemoryReader(store).get) is None
    assert hybrid.rank("q", [], 0, options()) is not None and not hybrid.failed


def test_a_runtime_failure_turns_the_session_lexical_with_one_line(
    store: MemoryStore, tmp_path: Path
) -> None:
    save_many(store, 2)
    model, lines = CountingModel(fail=True), []
    hybrid = open_hybrid(store, tmp_path / "v.bin", model, lines)
    assert hybrid.rank("q", [], 0, options()) is None
    model.fail = False
    assert hybrid.rank("q", [], 0, options()) is None
    assert lines == [warmup.RUNTIME_FAILED]


def test_an_unwritable_file_keeps_vectors_in_memory_with_one_line(store: MemoryStore, tmp_path: Path) -> None:
    save_many(store, 2)
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the directory should be")
    model, lines = CountingModel(), []
    hybrid = open_hybrid(store, blocked / "squirrel-notes" / "v.bin", model, lines)
    warmed(hybrid)
    assert hybrid.rank("q", [], 0, options()) is not None
    save_many(store, 1)
    warmed(hybrid)
    assert hybrid.rank("q", [], 0, options()) is not None
    assert lines == [warmup.UNWRITABLE] and len(hybrid.table) == 3
    assert len(model.texts) == 3 + 2


def test_meaning_only_hits_pass_the_filters_and_the_servers_check(store: MemoryStore, tmp_path: Path) -> None:
    saved = save_many(store, 5)
    store.update(saved[1].id, changes={"tags": ["keep"]}, reason=None)
    hybrid = warmed(open_hybrid(store, tmp_path / "v.bin", CountingModel(), []))
    reader = MemoryReader(store)

    filtered = RankOptions(10, True, None, ("keep",), datetime.now(UTC))
    answer = hybrid.rank("q", [], 0, filtered)
    assert answer is not None and [hit.memory_id for hit in answer.hits] == [saved[1].id]
    assert check_ranking(answer, [], filtered, reader.get) is None
    everything = RankOptions(3, True, None, (), datetime.now(UTC))
    answer = hybrid.rank("q", [], 0, everything)
    assert answer is not None and check_ranking(answer, [], everything, reader.get) is None
    assert answer.total == 5 and len(answer.hits) == 3  # floor -1: all members, no near misses left


def test_memories_changed_the_same_day_are_ordered_by_cosine_not_by_seconds_of_age(
    store: MemoryStore, tmp_path: Path
) -> None:
    # Saved milliseconds apart: their recency weights differ in the last decimals only.
    saved = [
        store.save(entity="user", text=f"event number {i}", category="event", tags=[], keywords=[])
        for i in range(8)
    ]
    two_days_ago = datetime.now(UTC) - timedelta(days=2)
    two_days = two_days_ago.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    older = memory("an older event").model_copy(update={"category": "event", "createdAt": two_days})
    older = older.model_copy(update={"updatedAt": two_days})
    store.import_history([older])
    hybrid = warmed(open_hybrid(store, tmp_path / "v.bin", CountingModel(), []))
    # Floor -1, span 0.01: every cosine above -0.99 gives the full meaning part.
    hybrid.span = 0.01
    answer = hybrid.rank("q", [], 0, options(limit=20))
    assert answer is not None
    hits = [hit for hit in answer.hits if hit.memory_id != older.id]
    cosines = [hit.semantic_score for hit in hits]
    assert len(hits) == len(saved) and cosines == sorted(cosines, reverse=True)  # type: ignore[type-var]
    # A memory two days older still ranks below them, whatever its cosine.
    assert answer.hits[-1].memory_id == older.id


def test_decay_is_the_lexical_decay() -> None:
    now = datetime(2026, 6, 1, tzinfo=UTC)
    old = memory("x").model_copy(
        update={"updatedAt": (now - timedelta(days=90)).isoformat().replace("+00:00", "Z")}
    )
    assert age_days(old, now) == pytest.approx(90)
    assert decay("event", 90) < decay("fact", 90) <= 1
    assert math.isclose(decay("profile", 90), 1.0)


def test_vector_path_is_per_account_in_the_cache_dir(tmp_path: Path) -> None:
    assert vectors.vector_path("abc123", {"SQUIRREL_MEMORY_CACHE_DIR": str(tmp_path)}) == (
        tmp_path / "squirrel-notes" / "memory-vectors-abc123.bin"
    )
    default = vectors.vector_path("abc123", {})
    assert default.parent.name == "squirrel-notes" and default.parent.parent.is_absolute()
    with pytest.raises(ValueError, match="account id"):
        vectors.vector_path("../etc", {})


def test_derive_key_is_per_purpose_and_never_the_data_key(store: MemoryStore) -> None:
    reader = MemoryReader(store)
    key = reader.derive_key("memory-vectors")
    assert len(key) == 32 and key == reader.derive_key("memory-vectors")
    assert key != reader.derive_key("something-else") and key != store._log._key
    with pytest.raises(ValueError, match="purpose"):
        reader.derive_key("")


def test_after_close_no_search_ranks_and_no_file_is_written(store: MemoryStore, tmp_path: Path) -> None:
    save_many(store, 3)
    path = tmp_path / "cache" / "v.bin"
    model, lines = CountingModel(), []
    hybrid = open_hybrid(store, path, model, lines)
    hybrid.close()
    assert hybrid.rank("q", [], 0, options()) is None
    hybrid.flush()
    assert not path.exists() and not path.parent.exists()
    assert model.texts == [] and lines == []
