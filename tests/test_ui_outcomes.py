"""A refused form's outcome, kept for the page the form redirects to: by key, for a while, a few."""

from __future__ import annotations

from squirrel_mcp.ui.outcomes import BULK, KEEP_SECONDS, LIST, MOST, NEW, BulkOutcome, Outcome, Outcomes

MEMORY = "0123456789abcdef"


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_kept_under_a_random_key_for_its_memory_only() -> None:
    outcomes = Outcomes()
    outcome = Outcome(MEMORY, [("text", "at most 4000 characters")], values={"text": "unsaved"})
    key = outcomes.keep(outcome)
    assert len(key) == 22 and "unsaved" not in key
    assert outcomes.find(key, MEMORY) is outcome
    # Found again (a reload), never for another memory, and no guessed or malformed key.
    assert outcomes.find(key, MEMORY) is outcome
    assert outcomes.find(key, "fedcba9876543210") is None
    assert outcomes.keep(outcome) != key
    assert outcomes.find("A" * 22, MEMORY) is None
    assert outcomes.find(key + "x", MEMORY) is None


def test_gone_after_a_while_and_the_oldest_first() -> None:
    clock = Clock()
    outcomes = Outcomes(clock=clock)
    first = outcomes.keep(Outcome(MEMORY, []))
    clock.now += KEEP_SECONDS - 1
    assert outcomes.find(first, MEMORY) is not None
    clock.now += 1
    assert outcomes.find(first, MEMORY) is None
    keys = [outcomes.keep(Outcome(MEMORY, [])) for _ in range(MOST + 1)]
    assert outcomes.find(keys[0], MEMORY) is None
    assert all(outcomes.find(key, MEMORY) is not None for key in keys[1:])


def test_each_outcome_is_found_only_on_the_page_it_names() -> None:
    outcomes = Outcomes()
    bulk = BulkOutcome("delete", None, done=[(MEMORY, 2)])
    added = Outcome(NEW, [("text", "at least 1 character")], values={"text": ""})
    bulk_key, added_key = outcomes.keep(bulk), outcomes.keep(added)
    assert outcomes.find(bulk_key, BULK) is bulk and outcomes.find(added_key, NEW) is added
    for key in (bulk_key, added_key):
        for where in (LIST, MEMORY):
            assert outcomes.find(key, where) is None
    assert outcomes.find(bulk_key, NEW) is None and outcomes.find(added_key, BULK) is None
