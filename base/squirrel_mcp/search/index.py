"""The search index: an inverted index over the vault's live memories, kept in memory.

The memory store adds a memory when a new revision of it is decrypted and drops
it when it is deleted, so each save, correction or delete re-tokenizes that one
memory and a search never tokenizes the vault. Like the decrypted view it is
built from, the index lives in the server's memory; it reaches the disk only inside
the sealed snapshot of the decrypted state (`image`, `from_image`, squirrel_mcp.book.snapshot),
so that the next start need not tokenize every memory again.

Each posting holds the memory's BM25 term weight for that term, computed once when
the memory is indexed (an impact-ordered index in the sense of Anh & Moffat,
"Pruned query evaluation using pre-computed impacts", 2006), so a search only adds
up weights. Two choices make that possible:

- Fields are weighted as in BM25F (Robertson, Zaragoza & Taylor, "Simple BM25
  extension to multiple weighted fields", 2004): a term's frequency is the sum of
  its counts in each field times the field's weight, and the memory's length is
  the weighted sum of its fields' lengths.
- Length is normalised against a fixed typical memory length rather than the
  vault's running average, so one save never changes every other memory's weights.
- The recency decay is split in two: the part from the memory's date to the index's
  epoch is folded into its weights; the part from the epoch to now is the same for
  every memory of a category and is applied per search.

The index is compact: a memory is a document number (its place in `docs`), and a
term's posting is two flat arrays, the numbers of the memories holding it in
increasing order and their weights as C doubles, rather than a Python object per
posting (a 100,000-memory vault holds about three million postings). A new memory
gets the next number, so postings stay sorted by appending; removing a memory takes
it out of each of its postings by bisection (its terms are found by tokenizing it
again) and leaves a hole in `docs`, and once the holes outnumber the live memories
the documents are numbered afresh.

A query word of three or more characters also finds the terms that begin with it
(`squirrel_mcp.text.tokens`). The index keeps its terms in a sorted list, the
vocabulary, so the terms beginning with a word are one bisection and a short walk
away (`expand`), never a scan of every term. The list is brought up to date at the
first search after a change: the terms that appeared or vanished since are put in
or taken out one by one by bisection, or, after many changes (a vault unlocked,
another process's batch of writes), the list is sorted again from scratch.
"""

from __future__ import annotations

import bisect
import itertools
import threading
import time
from array import array
from collections import Counter
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from squirrel_mcp.core.models import HALF_LIFE_DAYS, Revision, parse_iso
from squirrel_mcp.text.tokens import begins_with, document_terms, text_content

# The entity, tags and keywords are labels chosen so the memory is found again;
# a word there says more about what the memory is about than the same word said
# in passing in the text, so they count twice. Whole numbers: a field's terms are
# counted that many times.
FIELD_WEIGHTS = {"entity": 2, "text": 1, "tags": 2, "keywords": 2}
# A hyphen part, or a character inside a pair, is half a match (docs/search.md).
HALF = 0.5
SECONDS_PER_DAY = 86_400.0
# BM25's usual constants (Robertson & Zaragoza, "The Probabilistic Relevance
# Framework", 2009): term-frequency saturation and length normalisation.
BM25_K1 = 1.2
BM25_B = 0.75
# BM25's avgdl, fixed: a memory is a sentence or two; with the entity and labels
# counted twice that is about 30 weighted words.
TYPICAL_LENGTH = 30.0
# Past this many changed terms, sorting the vocabulary again beats bisecting each in.
RESORT_CHANGES = 256
# The documents are numbered afresh once the holes left by removed memories are more
# than this and more than the live memories: rare, and linear in the postings.
RENUMBER_HOLES = 1024
# The documents of a project the index holds no memory of.
_NO_DOCS: frozenset[int] = frozenset()
# A memory's category as one byte, its place in this list.
CATEGORIES = list(HALF_LIFE_DAYS)
_CATEGORY_CODES = {category: code for code, category in enumerate(CATEGORIES)}
# The fields by weight: the fields of one weight are tokenized together.
_WEIGHT_GROUPS = [
    (weight, [name for name, its in FIELD_WEIGHTS.items() if its == weight])
    for weight in sorted(set(FIELD_WEIGHTS.values()))
]


def saturate(tf: float, denominator: float) -> float:
    """BM25's term-frequency part: tf (k1 + 1) / (tf + k1 (1 - b + b dl / avgdl))."""
    return tf * (BM25_K1 + 1) / (tf + denominator)


def halvings(category: str, seconds: float) -> float:
    """How many half-lives of `category` fit in `seconds` (0 for a category that never fades)."""
    half_life = HALF_LIFE_DAYS[category]
    return 0.0 if half_life is None else seconds / (half_life * SECONDS_PER_DAY)


def recency(category: str, seconds: float) -> float:
    """The category's recency weight after `seconds`: 1 when new, halving every half-life."""
    return float(0.5 ** halvings(category, seconds))


class Posting:
    """The memories holding one term: document numbers in increasing order, and each one's weight."""

    __slots__ = ("docs", "weights")

    def __init__(self, docs: array[int] | None = None, weights: array[float] | None = None) -> None:
        """A posting of `docs` and their `weights` (empty by default)."""
        self.docs = array("I") if docs is None else docs
        self.weights = array("d") if weights is None else weights

    def __len__(self) -> int:
        """How many memories hold the term."""
        return len(self.docs)

    def table(self) -> dict[int, float]:
        """Document number -> weight."""
        return dict(zip(self.docs, self.weights, strict=True))

    def position(self, doc: int) -> int | None:
        """Where `doc` is in the posting, or None when it does not hold the term."""
        position = bisect.bisect_left(self.docs, doc)
        return position if position < len(self.docs) and self.docs[position] == doc else None


def memory_terms(memory: Revision) -> tuple[Counter[str], Counter[str], int]:
    """A memory's full terms and half terms, each counted times its field's weight (BM25F), and its length.

    The length is the weighted count of its full terms. Terms never span a space, so
    the ASCII values of the fields of one weight are cut in one go, joined by spaces.
    """
    values = {"entity": [memory.entity], "text": [memory.text]}
    values |= {"tags": memory.tags, "keywords": memory.keywords}
    full: list[str] = []
    half: list[str] = []
    for weight, names in _WEIGHT_GROUPS:
        texts = [value for name in names for value in values[name]]
        joined = " ".join(texts)
        for text in (joined,) if joined.isascii() else texts:
            terms = document_terms(text)
            full += terms.full * weight
            if terms.half:
                half += terms.half * weight
    return Counter(full), Counter(half) if half else Counter(), len(full)


@dataclass(frozen=True)
class IndexImage:
    """A search index as flat data, to seal in a snapshot and load back without tokenizing (snapshot.py).

    - `epoch`: the moment the weights' decay runs to;
    - `ids`: each document number's memory id, None for a hole;
    - `terms`: every term, sorted; `sizes`: how many documents each one's posting holds;
    - `docs`, `weights`: every posting's two arrays end to end, in the order of `terms`;
    - `partial`: the terms some documents hold only at half, and those documents;
    - `categories`, `content`: each document's category code and count of its text's content words.
    """

    epoch: float
    ids: list[str | None]
    terms: list[str]
    sizes: array[int]
    docs: array[int]
    weights: array[float]
    partial: dict[str, list[int]]
    categories: bytes
    content: array[int]


class SearchIndex:
    """Term -> posting (memories, BM25 weights times decay to the epoch) over the live memories.

    Hold `lock` while reading `postings`, `partial`, `docs` and `categories`, or
    calling `expand`: tools run in worker threads, and a save may update the index
    during a search.
    """

    def __init__(self, memories: list[Revision] | None = None) -> None:
        """An index holding `memories` (none by default)."""
        self.lock = threading.RLock()
        # The moment the folded-in decay runs to; any fixed time works, now keeps numbers near 1.
        self.epoch = time.time()
        self.postings: dict[str, Posting] = {}
        # The documents holding a term only as a hyphen part or inside a pair: they hold it at half.
        self.partial: dict[str, set[int]] = {}
        # Document number -> the memory's revision, or None for a hole a removed memory left.
        self.docs: list[Revision | None] = []
        # Document number -> the memory's category as its place in CATEGORIES.
        self.categories = bytearray()
        # Document number -> how many distinct content terms (full, not stopwords) it has.
        self._content = array("I")
        self._numbers: dict[str, int] = {}
        self._holes = 0
        # Every key of `postings`, sorted, as of the last `expand`; `changed` holds the
        # terms that were added to or dropped from `postings` since.
        self._vocabulary: list[str] = []
        self._changed: set[str] = set()
        # Project -> its documents (None: no project), so a search scoped to projects keeps their
        # matches by set intersection. Made at the first such search, then kept up to date.
        self._projects: dict[str | None, set[int]] | None = None
        for memory in memories or []:
            self.add(memory)

    def __len__(self) -> int:
        """How many memories the index holds."""
        return len(self._numbers)

    def image(self) -> IndexImage:
        """The index as it is now, as flat data (copied: later changes do not reach it)."""
        with self.lock:
            terms = list(self.vocabulary())
            sizes = array("I")
            docs = array("I")
            weights = array("d")
            for term in terms:
                posting = self.postings[term]
                sizes.append(len(posting.docs))
                docs.extend(posting.docs)
                weights.extend(posting.weights)
            return IndexImage(
                epoch=self.epoch,
                ids=[None if memory is None else memory.id for memory in self.docs],
                terms=terms,
                sizes=sizes,
                docs=docs,
                weights=weights,
                partial={term: sorted(docs) for term, docs in self.partial.items()},
                categories=bytes(self.categories),
                content=array("I", self._content),
            )

    @classmethod
    def from_image(cls, image: IndexImage, memories: Mapping[str, Revision]) -> SearchIndex:
        """The index `image` was taken of, its documents' revisions taken from `memories` (by id).

        ValueError when the image does not hold together (which a sealed image of ours always does).
        """
        count = len(image.ids)
        if not (
            len(image.categories) == len(image.content) == count
            and len(image.sizes) == len(image.terms)
            and sum(image.sizes) == len(image.docs) == len(image.weights)
            and all(doc < count for docs in image.partial.values() for doc in docs)
        ):
            raise ValueError("the index image does not hold together")
        index = cls()
        index.epoch = image.epoch
        index.docs = [None if memory_id is None else memories[memory_id] for memory_id in image.ids]
        index.categories = bytearray(image.categories)
        index._content = image.content
        index._numbers = {memory_id: doc for doc, memory_id in enumerate(image.ids) if memory_id is not None}
        index._holes = count - len(index._numbers)
        offsets = itertools.accumulate(image.sizes, initial=0)
        start = next(offsets)
        postings = index.postings
        for term, end in zip(image.terms, offsets, strict=True):
            # A posting is in increasing order: its last document is its largest.
            if end == start or image.docs[end - 1] >= count:
                raise ValueError("the index image does not hold together")
            postings[term] = Posting(image.docs[start:end], image.weights[start:end])
            start = end
        index.partial = {term: set(docs) for term, docs in image.partial.items()}
        index._vocabulary = image.terms
        return index

    def memory(self, memory_id: str) -> Revision | None:
        """The indexed revision of a live memory, or None when the index holds no memory with this id."""
        with self.lock:
            doc = self._numbers.get(memory_id)
            return None if doc is None else self.docs[doc]

    def number(self, memory_id: str) -> int | None:
        """The document number of a live memory, or None when the index does not hold it."""
        with self.lock:
            return self._numbers.get(memory_id)

    def content_count(self, doc: int) -> int:
        """How many content words (`text_content`) document `doc`'s text has."""
        return self._content[doc]

    def add(self, memory: Revision) -> None:
        """Index `memory`, replacing any earlier revision of it."""
        full, half, length = memory_terms(memory)
        # A date ahead of this machine's clock (another device's) counts as now.
        updated = min(parse_iso(memory.updatedAt).timestamp(), time.time())
        weight = recency(memory.category, self.epoch - updated)
        denominator = BM25_K1 * (1 - BM25_B + BM25_B * length / TYPICAL_LENGTH)
        frequencies: dict[str, float] = full  # type: ignore[assignment]
        if half:
            frequencies = dict(full)
            for term, count in half.items():
                frequencies[term] = frequencies.get(term, 0) + HALF * count
        # A memory has few distinct frequencies: work each one's weight out once.
        weights = {tf: weight * saturate(tf, denominator) for tf in set(frequencies.values())}
        with self.lock:
            self.remove(memory.id)
            doc = len(self.docs)
            postings = self.postings
            for term, tf in frequencies.items():
                posting = postings.get(term)
                if posting is None:
                    posting = postings[term] = Posting()
                    self._changed.add(term)
                posting.docs.append(doc)
                posting.weights.append(weights[tf])
            for term in half.keys() - full.keys():
                self.partial.setdefault(term, set()).add(doc)
            self.docs.append(memory)
            self.categories.append(_CATEGORY_CODES[memory.category])
            self._content.append(len(text_content(memory.text)))
            self._numbers[memory.id] = doc
            if self._projects is not None:
                self._projects.setdefault(memory.project, set()).add(doc)

    def remove(self, memory_id: str) -> None:
        """Drop a memory from the index; nothing happens if it is not there."""
        with self.lock:
            doc = self._numbers.pop(memory_id, None)
            if doc is None:
                return
            memory = self.docs[doc]
            assert memory is not None
            self.docs[doc] = None
            self._holes += 1
            if self._projects is not None:
                held = self._projects[memory.project]
                held.discard(doc)
                if not held:
                    del self._projects[memory.project]
            full, half, _ = memory_terms(memory)
            for term in full.keys() | half.keys():
                posting = self.postings[term]
                position = posting.position(doc)
                assert position is not None, "a memory's terms are those it was indexed under"
                del posting.docs[position]
                del posting.weights[position]
                if not posting.docs:
                    del self.postings[term]
                    self._changed.add(term)
                partial = self.partial.get(term)
                if partial is not None:
                    partial.discard(doc)
                    if not partial:
                        del self.partial[term]
            if self._holes > max(RENUMBER_HOLES, len(self._numbers)):
                self._renumber()

    def _renumber(self) -> None:
        """Number the live documents afresh, 0 up in their order, closing the holes."""
        kept = [memory is not None for memory in self.docs]
        numbers = array("I", bytes(4 * len(self.docs)))
        for new, old in enumerate(itertools.compress(range(len(self.docs)), kept)):
            numbers[old] = new
        renumber = numbers.__getitem__
        for posting in self.postings.values():
            # The order is kept, so each posting stays sorted.
            posting.docs = array("I", map(renumber, posting.docs))
        self.partial = {term: set(map(renumber, docs)) for term, docs in self.partial.items()}
        self.docs = list(itertools.compress(self.docs, kept))
        self.categories = bytearray(itertools.compress(self.categories, kept))
        self._content = array("I", itertools.compress(self._content, kept))
        self._numbers = {memory.id: doc for doc, memory in enumerate(self.docs) if memory is not None}
        self._holes = 0
        # Made afresh, with the new numbers, at the next search that needs it.
        self._projects = None

    def vocabulary(self) -> list[str]:
        """Every term in the index, sorted: brought up to date with the changes since the last call."""
        with self.lock:
            changed = self._changed
            vocabulary = self._vocabulary
            if len(changed) > RESORT_CHANGES:
                self._vocabulary = sorted(self.postings)
            else:
                for term in changed:
                    position = bisect.bisect_left(vocabulary, term)
                    listed = position < len(vocabulary) and vocabulary[position] == term
                    if term in self.postings and not listed:
                        vocabulary.insert(position, term)
                    elif listed and term not in self.postings:
                        del vocabulary[position]
            changed.clear()
            return self._vocabulary

    def expand(self, prefix: str, limit: int | None = None) -> list[str]:
        """The terms in the index that are `prefix` or begin with it (`tokens.begins_with`), sorted.

        With a `limit`, at most that many longer terms besides `prefix` itself: the
        shortest, and of the same length the first in sorted order. The shortest are
        the nearest forms of the word ("gardens" before "gardenersworld").
        """
        with self.lock:
            vocabulary = self.vocabulary()
            position = bisect.bisect_left(vocabulary, prefix)
            found = []
            while position < len(vocabulary) and vocabulary[position].startswith(prefix):
                if begins_with(vocabulary[position], prefix):
                    found.append(vocabulary[position])
                position += 1
        exact = found[:1] if found[:1] == [prefix] else []
        if limit is None or len(found) - len(exact) <= limit:
            return found
        # sorted() is stable, so terms of one length keep their sorted order.
        return exact + sorted(sorted(found[len(exact) :], key=len)[:limit])

    def in_project(self, project: str | None) -> AbstractSet[int]:
        """The numbers of `project`'s documents (None: those with no project); hold `lock` to use them."""
        with self.lock:
            if self._projects is None:
                projects: dict[str | None, set[int]] = {}
                for doc, memory in enumerate(self.docs):
                    if memory is not None:
                        projects.setdefault(memory.project, set()).add(doc)
                self._projects = projects
            return self._projects.get(project, _NO_DOCS)

    def fading(self, now: float) -> list[float]:
        """Each category's decay from the epoch to `now` (epoch seconds), by code: what a search applies."""
        return [recency(category, now - self.epoch) for category in CATEGORIES]

    def level(self, term: str, doc: int) -> float:
        """How fully document `doc` holds a term: 1, HALF (only as a part or inside a pair), or 0."""
        posting = self.postings.get(term)
        if posting is None or posting.position(doc) is None:
            return 0.0
        partial = self.partial.get(term)
        return HALF if partial is not None and doc in partial else 1.0

    def holders(self, term: str) -> dict[str, float]:
        """Memory id -> weight for each memory holding `term`, to inspect the index."""
        with self.lock:
            posting = self.postings.get(term)
            if posting is None:
                return {}
            return {self._id(doc): weight for doc, weight in zip(posting.docs, posting.weights, strict=True)}

    def partly_held(self, term: str) -> set[str]:
        """The ids of the memories holding `term` only at half (to inspect the index)."""
        with self.lock:
            return {self._id(doc) for doc in self.partial.get(term, ())}

    def _id(self, doc: int) -> str:
        memory = self.docs[doc]
        assert memory is not None, "postings only hold live documents"
        return memory.id
