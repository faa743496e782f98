"""The rules scripts/calibrate_hooks.py searches, and what each does on the searches it made.

Every search is kept with its five hits (`Asked`), so each rule of a grid is applied to the
same rankings through `Rule.kept`, the code `confident_hits` runs.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace

from squirrel_mcp.server.confidence import Rule
from squirrel_mcp.server.results import SearchHit

# The share of unanswerable prompts that may be shown anything, in every vault.
TARGET = 0.10
# LoCoMo shares this close to the best count as even: 0.01 of its 762 questions is 7 or 8, less
# than one rule's edge over another can be trusted to hold on other conversations.
EVEN = 0.01
HYBRID, WORDS = "hybrid", "words only"


@dataclass(frozen=True)
class Asked:
    """One search as the prompt hook makes it: where, how ranked, its hits, and which would answer."""

    kind: str  # "locomo", "paraphrase", "exact" (answerable) or "prompt" (nothing answers)
    vault: str
    ranking: str
    hits: list[SearchHit]
    answers: frozenset[str]


@dataclass(frozen=True)
class Figures:
    """What one rule does on one ranking's searches."""

    shown: dict[str, float]  # per answerable kind: the share of its questions shown anything
    answered: dict[str, float]  # per answerable kind: the share shown an answer (an evidence turn)
    precision: dict[str, float]  # per answerable kind: of the questions shown anything, the share answered
    prompts: dict[str, float]  # per vault: the share of unanswerable prompts shown anything
    questions: dict[str, int]  # per answerable kind: how many
    # LoCoMo: hits shown per question shown anything, and the share of the hits shown that are evidence
    hits_shown: float = 0.0
    hits_answering: float = 0.0

    @property
    def worst_prompts(self) -> float:
        return max(self.prompts.values(), default=0.0)


def figures(rule: Rule, asked: Sequence[Asked]) -> Figures:
    """`rule` applied to every search of one ranking."""
    shown: dict[str, list[bool]] = {}
    answered: dict[str, list[bool]] = {}
    prompts: dict[str, list[bool]] = {}
    hits: list[bool] = []  # each hit shown for a LoCoMo question: is it evidence
    for search in asked:
        kept = rule.kept(search.hits)
        if search.kind == "locomo":
            hits += [hit.id in search.answers for hit in kept]
        if search.kind == "prompt":
            prompts.setdefault(search.vault, []).append(bool(kept))
            continue
        shown.setdefault(search.kind, []).append(bool(kept))
        answered.setdefault(search.kind, []).append(any(hit.id in search.answers for hit in kept))

    def share(flags: list[bool]) -> float:
        return sum(flags) / len(flags) if flags else 0.0

    return Figures(
        shown={kind: share(flags) for kind, flags in shown.items()},
        answered={kind: share(flags) for kind, flags in answered.items()},
        precision={kind: sum(answered[kind]) / max(1, sum(flags)) for kind, flags in shown.items()},
        prompts={vault: share(flags) for vault, flags in prompts.items()},
        questions={kind: len(flags) for kind, flags in shown.items()},
        hits_shown=len(hits) / max(1, sum(shown.get("locomo", []))),
        hits_answering=share(hits),
    )


# The grids searched, per ranking. min_lexical 0.999: every word (a share of 1 up to rounding);
# 1.01 (above any share): words never suffice alone.
# A hybrid score is 0-1 (docs/hybrid.md); a words-only score is BM25's, whose scale grows with
# the vault (a rarer word weighs more), so its grid is wider.
SEMANTIC = (0.30, 0.35, 0.38, 0.40, 0.42, 0.43, 0.44, 0.45, 0.46, 0.48, 0.50, 0.55, 0.60, 0.65, 0.70)
LEXICAL = (0.34, 0.5, 0.6, 0.67, 0.75, 0.8, 0.999, 1.01)
SCORES = {HYBRID: (0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7), WORDS: (0.0, 4, 6, 8, 9, 10, 11, 12, 13, 14, 16, 20)}
GAPS = {HYBRID: (0.0, 0.02, 0.05, 0.1), WORDS: (0.0, 0.5, 1, 2, 4)}


def grid(ranking: str) -> list[Rule]:
    """Every rule searched for `ranking`."""
    semantic: Sequence[float | None] = SEMANTIC if ranking == HYBRID else (None,)
    return [
        Rule(min_semantic=s, min_lexical=lexical, min_score=score, min_gap=gap)
        for s, lexical, score, gap in itertools.product(semantic, LEXICAL, SCORES[ranking], GAPS[ranking])
    ]


def answered(pair: tuple[Rule, Figures]) -> float:
    return pair[1].answered.get("locomo", 0.0)


def within_target(measured: Sequence[tuple[Rule, Figures]]) -> list[tuple[Rule, Figures]]:
    return [pair for pair in measured if pair[1].worst_prompts <= TARGET]


def choose(measured: Sequence[tuple[Rule, Figures]]) -> tuple[Rule, Figures]:
    """Within TARGET in every vault, (nearly) the most LoCoMo questions shown an evidence turn.

    Of the rules within EVEN of the most, the one showing the fewest unanswerable prompts
    anything in its worst vault, then the most LoCoMo questions, then the most precise: a rule
    at the target's very edge on 60 prompts is one prompt away from past it.
    """
    within = within_target(measured)
    if not within:
        raise SystemExit("calibrate_hooks: no rule of the grid keeps the prompts within the target")
    best = max(map(answered, within))
    near = [pair for pair in within if answered(pair) >= best - EVEN]
    return min(
        near,
        key=lambda pair: (
            pair[1].worst_prompts,
            -answered(pair),
            -pair[1].precision.get("locomo", 0.0),
            pair[0].min_score,
            pair[0].min_gap,
        ),
    )


# How far below the best hit kept a hit may score and still be shown (`Rule.within_best`).
LEADS = {HYBRID: (None, 0.02, 0.05, 0.1, 0.15, 0.2), WORDS: (None, 1.0, 2.0, 4.0, 6.0, 8.0)}


def narrowed(ranking: str, chosen: Rule, asked: Sequence[Asked]) -> list[tuple[Rule, Figures]]:
    """The chosen rule with each of LEADS's cuts below the best hit kept, measured."""
    return [
        (replace(chosen, within_best=lead), figures(replace(chosen, within_best=lead), asked))
        for lead in LEADS[ranking]
    ]


def narrowest(chosen: tuple[Rule, Figures], variants: Sequence[tuple[Rule, Figures]]) -> tuple[Rule, Figures]:
    """Of the cuts losing at most EVEN of the chosen rule's LoCoMo answers, the one showing the fewest hits.

    A cut never adds a prompt shown anything (the best hit is always kept), so the target holds.
    """
    floor = answered(chosen) - EVEN
    even = [pair for pair in variants if answered(pair) >= floor - 1e-9]
    return min(even, key=lambda pair: (pair[1].hits_shown, -answered(pair)))
