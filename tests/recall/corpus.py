"""The recall corpus (this folder's JSON files) as the tests and the gate use it, and its measures.

Everything here is synthetic (README.md). A corpus memory `r001` becomes the memory
id `0000000000000001`, saved `ageDays` before NOW.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from squirrel_mcp.core.models import Revision

RECALL = Path(__file__).parent
# Ages are counted back from this moment; it lies in the past so no memory is dated ahead of the clock.
NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)
TOP = 5


def load(name: str) -> list[dict[str, Any]]:
    """One of the corpus files, parsed."""
    data: list[dict[str, Any]] = json.loads((RECALL / name).read_text(encoding="utf-8"))
    return data


CORPUS = load("corpus.json")
QUERIES = load("queries.json")
RANKING = load("ranking.json")
SCRIPTS = load("scripts.json")
# Questions nothing in the corpus answers: what a search finds for them is noise.
UNANSWERABLE = load("unanswerable.json")
BY_ID = {memory["id"]: memory for memory in CORPUS}
# The four query sets the gate reports, by name.
SETS = {
    "paraphrase": [q for q in QUERIES if q["kind"] == "paraphrase"],
    "exact": [q for q in QUERIES if q["kind"] == "exact"],
    "ranking": RANKING,
    "scripts": SCRIPTS,
}


def hex_id(corpus_id: str) -> str:
    """The 16-hex memory id for a corpus id: r001 -> 0000000000000001."""
    return f"{int(corpus_id[1:]):016x}"


def revision(memory: Mapping[str, Any]) -> Revision:
    """A corpus memory as the store holds it: revision 1, created `ageDays` before NOW."""
    stamp = (NOW - timedelta(days=memory["ageDays"])).isoformat().replace("+00:00", "Z")
    return Revision.model_validate(
        {
            "id": hex_id(memory["id"]),
            "entity": memory["entity"],
            "text": memory["text"],
            "tags": memory["tags"],
            "keywords": memory["keywords"],
            "category": memory["category"],
            "createdAt": stamp,
            "updatedAt": stamp,
            "revision": 1,
            "change": "created",
        }
    )


def measure(queries: Sequence[Mapping[str, Any]], ranked: Sequence[Sequence[str]]) -> dict[str, float]:
    """recall@1, recall@5 and MRR of ranked memory ids, averaged over `queries`.

    recall@k is the share of a query's expected ids in its top k, out of at most k
    (a query expecting 3 memories scores 1 at k=1 if any is first); MRR uses the
    rank of the first expected id found, 0 when none was returned.
    """
    at1 = at5 = reciprocal = 0.0
    for query, ids in zip(queries, ranked, strict=True):
        expected = {hex_id(corpus_id) for corpus_id in query["expected"]}
        at1 += len(expected.intersection(ids[:1])) / min(len(expected), 1)
        at5 += len(expected.intersection(ids[:TOP])) / min(len(expected), TOP)
        ranks = [rank for rank, memory_id in enumerate(ids, 1) if memory_id in expected]
        reciprocal += 1 / ranks[0] if ranks else 0.0
    count = len(queries)
    return {"recall@1": at1 / count, "recall@5": at5 / count, "MRR": reciprocal / count}
