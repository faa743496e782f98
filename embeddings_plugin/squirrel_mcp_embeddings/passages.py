"""How a memory longer than the model's window is read: its passages, one sentence each.

The model reads at most 256 tokens of a text, and the mean of a long text's tokens
says what the text is about, not what each of its sentences says: a fact in a page of
meeting notes is found neither past the window nor inside it. So a long memory is also
embedded passage by passage, and its cosine to a query is its best passage's (or its
whole text's). A passage is one sentence, because a sentence is how a fact is usually
stated: embedded alone (with the memory's entity, as the warm-up adds it), it is as
close to a question as the same sentence saved as a memory of its own. Measured on
tests/data/long_memories.json, windows of 32 to 128 tokens found fewer of the facts
than their own memories did (docs/benchmarks/long-memories.md); the neighbours a window
takes in pull a fact's cosine under the model's floor.

- Sentences end at ".", "!", "?" or "…" followed by a space, at "。", "！" or "？", and
  at every line break (list items, headings).
- A sentence of fewer than SHORTEST tokens ("Agenda:", "Serves six.") joins the next
  one: alone, it says too little to be found by, and costs a row.
- A sentence of more than PASSAGE_TOKENS tokens (a list without full stops, a table,
  code) is cut into windows of PASSAGE_TOKENS, each sharing PASSAGE_OVERLAP tokens with
  the next, so no part of it is lost between two windows.

Everything here works on character spans and the tokenizer's offsets; nothing is logged.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence

# The longest passage, in tokens; a longer sentence is cut into windows sharing PASSAGE_OVERLAP.
PASSAGE_TOKENS = 64
PASSAGE_OVERLAP = 32
# A sentence shorter than this (in tokens) joins the next one.
SHORTEST = 8

# Where a sentence ends: after its closing mark and the space that follows, after a full-width
# mark (Chinese and Japanese put no space), or at a line break.
_SENTENCE_END = re.compile(r"(?<=[.!?\u2026])\s+|(?<=[\u3002\uff01\uff1f])|\n+")

Offsets = Sequence[tuple[int, int]]


def windows(count: int, size: int, overlap: int) -> list[tuple[int, int]]:
    """The [start, end) token ranges of the windows over `count` tokens.

    A window of `size` starts every `size - overlap` tokens; the last one ends with the
    tokens (`count` no more than `size`: one window).
    """
    if not 0 <= overlap < size:
        raise ValueError("a window must be longer than its overlap")
    if count <= size:
        return [(0, count)]
    starts = list(range(0, count - size, size - overlap))
    starts.append(count - size)
    return [(start, start + size) for start in starts]


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """The [start, end) character spans of `text`'s sentences, blank ones left out."""
    spans = []
    start = 0
    for match in _SENTENCE_END.finditer(text):
        spans.append((start, match.start()))
        start = match.end()
    spans.append((start, len(text)))
    return [(start, end) for start, end in spans if text[start:end].strip()]


def passages(
    text: str,
    offsets: Offsets,
    size: int = PASSAGE_TOKENS,
    overlap: int = PASSAGE_OVERLAP,
    shortest: int = SHORTEST,
) -> list[str]:
    """`text`'s passages: its sentences, a short one joined to the next, a long one cut in windows.

    `offsets`: the [start, end) characters of each of `text`'s tokens, in order, as the
    model's tokenizer gives them (special tokens left out).
    """
    starts = [start for start, _ in offsets]

    def tokens(start: int, end: int) -> tuple[int, int]:
        """The range of the tokens that start inside [start, end)."""
        return bisect.bisect_left(starts, start), bisect.bisect_left(starts, end)

    joined: list[tuple[int, int]] = []
    carried: int | None = None
    for start, end in sentence_spans(text):
        start = start if carried is None else carried
        first, last = tokens(start, end)
        if last - first < shortest:
            carried = start
            continue
        joined.append((start, end))
        carried = None
    if carried is not None:
        # Short text at the end joins the sentence before it (or stands alone if there is none).
        joined[-1:] = [(joined[-1][0] if joined else carried, len(text))]
    pieces = []
    for start, end in joined:
        first, last = tokens(start, end)
        if last - first <= size:
            pieces.append(text[start:end].strip())
            continue
        for low, high in windows(last - first, size, overlap):
            pieces.append(text[offsets[first + low][0] : offsets[first + high - 1][1]])
    return pieces
