"""Which search hits a prompt's recall may show the agent unasked: those the ranking is confident in.

`confident_hits` keeps the hits of a search whose scores pass thresholds calibrated on data
(scripts/calibrate_hooks.py; docs/benchmarks/hooks.md): on questions a vault answers, how often
the hits kept hold an answer, and on prompts nothing in a vault answers, how often anything is
kept at all. A prompt is not a query: most prompts ask nothing of the memory ("fix the failing
test", "thanks!"), so the bar is set by how rarely those get anything, and recall is what is
left under that bar.
"""

from __future__ import annotations

from dataclasses import dataclass

from squirrel_mcp.server.results import SearchHit, SearchResult


@dataclass(frozen=True)
class Rule:
    """The thresholds a hit passes to be shown unasked.

    A hit with a semantic score (the plugin ranked it) is kept when its cosine to the prompt
    is at least `min_semantic`, or when it holds at least `min_lexical` of the prompt's content
    words. A hit without one (words only) is kept on the second alone. `min_score`, when set,
    also asks the ranking's own score to reach it, and `min_gap` asks the first hit to lead the
    second by that much in score (a flat top five is a ranking guessing, not knowing).
    `within_best`, when set, keeps only the hits whose score is within that of the best hit
    kept: a prompt naming a person comes close to every memory about them, and the one that
    answers stands out from the rest.
    """

    min_semantic: float | None
    min_lexical: float
    min_score: float = 0.0
    min_gap: float = 0.0
    within_best: float | None = None

    def keeps(self, hit: SearchHit) -> bool:
        """Whether `hit`'s own scores pass (the gap, which needs the others, is `kept`'s)."""
        if hit.nearMiss or hit.score < self.min_score:
            return False
        by_meaning = (
            self.min_semantic is not None
            and hit.semanticScore is not None
            and hit.semanticScore >= self.min_semantic
        )
        return by_meaning or hit.lexicalScore >= self.min_lexical

    def kept(self, hits: list[SearchHit]) -> list[SearchHit]:
        """The hits of one ranking (best first) this rule keeps, in rank order."""
        if self.min_gap and len(hits) > 1 and hits[0].score - hits[1].score < self.min_gap:
            return []
        kept = [hit for hit in hits if self.keeps(hit)]
        if self.within_best is None or not kept:
            return kept
        bar = max(hit.score for hit in kept) - self.within_best
        return [hit for hit in kept if hit.score >= bar]


# Calibrated by scripts/calibrate_hooks.py; the figures and the grid are in docs/benchmarks/hooks.md.
# Ranked by the plugin, the cosine alone decides: words never suffice (min_lexical above any share),
# as a prompt's few common words ("the other one", "thanks") match something in any vault. A hit
# still without a vector in such a ranking is therefore not shown.
# The bar was set by the largest vault measured (3,260 memories): more memories give a prompt
# more to come close to by chance, so a larger vault shows more prompts something.
HYBRID = Rule(min_semantic=0.42, min_lexical=1.01)
# Words only, a share of the prompt's words says little (a one-word prompt matches fully); BM25's
# score, which grows with how many and how rare the matched words are, does. Its scale also grows
# with the vault (a word is rarer among more memories): the same caveat, more so. Hits far below
# the best are left out: fewer shown for almost the same answers.
WORDS_ONLY = Rule(min_semantic=None, min_lexical=0.34, min_score=11.0, within_best=8.0)


def rule_for(result: SearchResult) -> Rule:
    """The rule for `result`'s ranking: a search the plugin ranked, or words only."""
    return HYBRID if result.ranking == "hybrid" else WORDS_ONLY


def confident_hits(result: SearchResult) -> list[SearchHit]:
    """The hits of `result` the ranking is confident in, in rank order (near misses never)."""
    return rule_for(result).kept(result.results)
