"""Which search hits a prompt's recall may show the agent unasked: those the ranking is confident in.

`confident_hits` keeps the hits of a search whose scores pass thresholds calibrated on data
(scripts/calibrate_hooks.py; docs/benchmarks/hooks.md): on questions a vault answers, how often
the hits kept hold an answer, and on prompts nothing in a vault answers, how often anything is
kept at all.
"""

from __future__ import annotations

from squirrel_mcp.server.results import SearchHit, SearchResult

# Placeholder thresholds until the calibration sets them.
MIN_SEMANTIC = 0.5
MIN_LEXICAL = 0.75


def confident_hits(result: SearchResult) -> list[SearchHit]:
    """The hits of `result` the ranking is confident in, in rank order (near misses never)."""
    return [hit for hit in result.results if not hit.nearMiss and _confident(hit)]


def _confident(hit: SearchHit) -> bool:
    if hit.semanticScore is not None:
        return hit.semanticScore >= MIN_SEMANTIC
    return hit.lexicalScore >= MIN_LEXICAL
