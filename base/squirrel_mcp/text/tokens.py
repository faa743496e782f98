"""Terms from text: Latin accents folded, words in any script, pairs where there are no spaces.

The rules (docs/search.md says them with examples):

- Case and accents on Latin letters are folded (crème -> creme, Straße -> strasse);
  accents on letters of other scripts are kept, so тёмная and темная differ.
- A word is a run of letters, digits and combining marks in any script. There is
  no stemming: тёмная does not find тёмную, 서울 does not find 서울에 (see below
  for prefixes).
- Chinese, Japanese, Thai, Lao, Khmer and Myanmar are written without spaces, so
  a run of them is cut into overlapping pairs of characters (a character with its
  combining marks). Each pair is a full term; each character inside a pair is a
  half term, so a one-character query counts half for each pair holding it.
- A hyphenated word is one full term spelled without its hyphens (Pi-hole and
  pihole are the same term) and each of its parts is a half term.

A query word of three or more characters (a character with its combining marks
counting as one) also matches as a prefix: it finds a memory's full term spelled
the same or beginning with it ("allerg" finds "allergic", "pihol" finds "pihole",
서울에 finds 서울에서), and a hyphen part spelled the same or beginning with it, at
half ("hol" finds the "hole" of "Pi-hole"). A query word of one or two characters
matches only a term spelled the same: "pi" finds the word "pi" or the part "pi" of
"Pi-hole" (at half), never "pipe"; 서울 does not find 서울에; "3d" does not find
"3ds". The parts of a hyphenated query word follow the same rule. Two kinds of
query term stay exact whatever their length (`matches_prefixes`): the pairs and
lone characters of pair-script text (they are pieces of a word, not words), and
stopwords (they only help to order hits, and
"the" should not find "theory"). Other forms of a word that are not longer
spellings of it are never matched: тёмная does not find тёмную.
"""

from __future__ import annotations

import functools
import itertools
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass

from squirrel_mcp.text.stopwords import STOPWORDS

# Latin letters that carry their accent in the letter itself, so Unicode
# decomposition leaves them whole; folded by hand like the decomposable ones.
_LATIN_EXTRA = str.maketrans(
    {"ø": "o", "ł": "l", "đ": "d", "ħ": "h", "ŧ": "t", "ı": "i", "æ": "ae", "œ": "oe", "þ": "th"}
)

# Ranges of the scripts written without spaces between words (Unicode blocks).
_PAIR_RANGES = (
    (0x0E00, 0x0EFF),  # Thai, Lao
    (0x1000, 0x109F),  # Myanmar
    (0x1780, 0x17FF),  # Khmer
    (0x19E0, 0x19FF),  # Khmer symbols
    (0x3005, 0x3007),  # 々 〆 〇
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x3100, 0x312F),  # Bopomofo
    (0x31A0, 0x31FF),  # Bopomofo extended, Katakana phonetic extensions
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xA9E0, 0xA9FF),  # Myanmar extended-B
    (0xAA60, 0xAA7F),  # Myanmar extended-A
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFF66, 0xFF9F),  # half-width Katakana (NFKC widens most of them)
    (0x20000, 0x3FFFF),  # CJK extensions B and later
)


def _char_class(ranges: list[tuple[int, int]]) -> str:
    return "".join(f"{re.escape(chr(lo))}-{re.escape(chr(hi))}" for lo, hi in ranges)


def _mark_ranges() -> list[tuple[int, int]]:
    """Ranges of combining marks: not word characters to `re`, yet part of words (Hindi, Thai)."""
    ranges: list[tuple[int, int]] = []
    # Marks outside planes 0-1 are only the variation selectors of plane 14.
    for cp in [*range(0x20000), *range(0xE0100, 0xE01F0)]:
        if unicodedata.category(chr(cp)).startswith("M"):
            if ranges and ranges[-1][1] == cp - 1:
                ranges[-1] = (ranges[-1][0], cp)
            else:
                ranges.append((cp, cp))
    return ranges


# Hyphen-minus, hyphen and non-breaking hyphen join the parts of one word.
_HYPHENS = "-\u2010\u2011"


@dataclass(frozen=True)
class _MarkPatterns:
    """The patterns that need the combining marks' ranges, found by scanning Unicode (some 30 ms)."""

    chunk: re.Pattern[str]  # a word, or hyphenated words
    mark: re.Pattern[str]  # one combining mark
    cluster: re.Pattern[str]  # a character and the combining marks after it: what a reader counts as one


@functools.cache
def _with_marks() -> _MarkPatterns:
    """The patterns, built on first use rather than on import.

    A process that never splits text (a server answering its handshake, a command
    printing its usage) does not pay the scan.
    """
    marks = _char_class(_mark_ranges())
    word_char = rf"(?:[^\W_]|[{marks}])"
    return _MarkPatterns(
        chunk=re.compile(rf"{word_char}+(?:[{_HYPHENS}]{word_char}+)*"),
        mark=re.compile(f"[{marks}]"),
        cluster=re.compile(rf"[^{marks}][{marks}]*"),
    )


# The chunk pattern on ASCII text, where a word character is a letter or digit and the
# hyphen-minus is the only hyphen: the same chunks, found several times faster.
_ASCII_CHUNK = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
# Without a hyphen, those chunks are the runs of letters and digits: every other ASCII
# character made a space, a split finds them faster still.
_ASCII_SPACES = str.maketrans(dict.fromkeys([c for c in map(chr, range(128)) if not c.isalnum()], " "))
_PAIR_RUN = re.compile(rf"[{_char_class(list(_PAIR_RANGES))}]+")
_HYPHEN_SPLIT = re.compile(f"[{_HYPHENS}]")
# A query word this many characters long or longer also matches as a prefix (the
# short-word rule: one or two letters match only whole words).
PREFIX_LENGTH = 3
_LETTER_OR_DIGIT = re.compile(r"[^\W_]")


@functools.lru_cache(maxsize=4096)
def _is_latin(char: str) -> bool:
    return "LATIN" in unicodedata.name(char, "")


def fold(text: str) -> str:
    """Case-fold, and drop accents on Latin letters only (crème -> creme, Straße -> strasse).

    Compatibility forms are unified first (full-width letters, ligatures such as "ﬁ").
    The soft hyphen is an invisible line-break hint, so it is removed, joining its word.
    """
    text = text.replace("\u00ad", "")
    if text.isascii():
        return text.lower()
    out: list[str] = []
    latin_base = False
    for char in unicodedata.normalize("NFKD", text):
        if unicodedata.combining(char):
            if not latin_base:
                out.append(char)
            continue
        latin_base = char.isascii() or _is_latin(char)
        out.append(char)
    folded = unicodedata.normalize("NFC", "".join(out)).casefold().translate(_LATIN_EXTRA)
    # Casefolding can un-compose (e.g. İ -> i + dot above); fold once more in that case.
    return folded if folded.isascii() else unicodedata.normalize("NFC", folded)


def has_letter_or_digit(text: str) -> bool:
    """Whether `text` holds a letter or digit in any script, i.e. anything searchable."""
    return _LETTER_OR_DIGIT.search(text) is not None


def _pairs(run: str) -> tuple[list[str], list[str]]:
    """Full terms (pairs, or the lone character) and half terms (characters inside pairs)."""
    chars = _with_marks().cluster.findall(run)
    if len(chars) == 1:
        return chars, []
    pairs = [a + b for a, b in itertools.pairwise(chars)]
    # A character in the middle of a run sits in two pairs, so it is listed twice.
    halves = [c for pair in itertools.pairwise(chars) for c in pair]
    return pairs, halves


def matches_prefixes(term: str) -> bool:
    """Whether a query term also finds the memory terms that begin with it.

    True for a word of PREFIX_LENGTH characters or more (a character with its
    combining marks counts once) that is not a stopword and holds no pair-script
    character (pairs and lone characters are pieces, matched exactly).
    """
    if term in STOPWORDS:
        return False
    if term.isascii():
        return len(term) >= PREFIX_LENGTH
    return len(_with_marks().mark.sub("", term)) >= PREFIX_LENGTH and _PAIR_RUN.search(term) is None


def begins_with(term: str, prefix: str) -> bool:
    """Whether `term` is `prefix` or begins with it, cut between characters, never before a combining mark."""
    if not term.startswith(prefix):
        return False
    return len(term) == len(prefix) or _with_marks().mark.match(term, len(prefix)) is None


@dataclass(frozen=True)
class Terms:
    """The terms of one field: full ones (whole words, pairs) and half ones (hyphen parts, characters)."""

    full: list[str]
    half: list[str]


def document_terms(text: str) -> Terms:
    """The terms a memory's field is found by, repeated as often as they occur."""
    folded = fold(text)
    if folded.isascii():
        return _ascii_terms(folded)
    full: list[str] = []
    half: list[str] = []
    for chunk in _with_marks().chunk.findall(folded):
        if _PAIR_RUN.search(chunk):
            for word in _split_pair_runs(chunk):
                if _PAIR_RUN.fullmatch(word):
                    pairs, chars = _pairs(word)
                    full.extend(pairs)
                    half.extend(chars)
                else:
                    full.append(word)
            continue
        parts = _HYPHEN_SPLIT.split(chunk)
        full.append("".join(parts))
        if len(parts) > 1:
            half.extend(parts)
    return Terms(full, half)


def _ascii_terms(folded: str) -> Terms:
    """`document_terms` of folded ASCII text: no pair-script runs, "-" the only hyphen."""
    if "-" not in folded:
        return Terms(folded.translate(_ASCII_SPACES).split(), [])
    chunks = _ASCII_CHUNK.findall(folded)
    full: list[str] = []
    half: list[str] = []
    for chunk in chunks:
        if "-" in chunk:
            parts = chunk.split("-")
            full.append("".join(parts))
            half.extend(parts)
        else:
            full.append(chunk)
    return Terms(full, half)


def _split_pair_runs(chunk: str) -> Iterator[str]:
    """A chunk holding pair-script text, cut into pair-script runs and the words between them."""
    position = 0
    for match in _PAIR_RUN.finditer(chunk):
        yield from (word for word in _HYPHEN_SPLIT.split(chunk[position : match.start()]) if word)
        yield match.group()
        position = match.end()
    yield from (word for word in _HYPHEN_SPLIT.split(chunk[position:]) if word)


@dataclass(frozen=True)
class QueryWord:
    """One word of a query, as `lexicalScore` counts it.

    `term` is the word's full term. `parts` are a hyphenated word's parts
    (stopwords left out), each worth half when the whole is missing. `stopword`
    words are left out of `lexicalScore`.
    """

    term: str
    parts: tuple[str, ...] = ()
    stopword: bool = False


def query_words(query: str) -> list[QueryWord]:
    """The distinct words of a query, in order; pair-script runs give one word per pair.

    A one-character pair-script run is a word of its own: it is held in full by a
    memory holding that character alone, and at half by one holding it in a pair.
    """
    words: dict[str, QueryWord] = {}
    for chunk in _with_marks().chunk.findall(fold(query)):
        if _PAIR_RUN.search(chunk):
            for word in _split_pair_runs(chunk):
                pieces = _pairs(word)[0] if _PAIR_RUN.fullmatch(word) else [word]
                for piece in pieces:
                    words.setdefault(piece, QueryWord(piece, stopword=piece in STOPWORDS))
            continue
        parts = _HYPHEN_SPLIT.split(chunk)
        term = "".join(parts)
        kept = tuple(part for part in parts if part not in STOPWORDS) if len(parts) > 1 else ()
        words.setdefault(term, QueryWord(term, kept, stopword=term in STOPWORDS))
    return list(words.values())


def content_words(words: list[QueryWord]) -> list[QueryWord]:
    """The words that are not stopwords (none when every one is)."""
    return [word for word in words if not word.stopword]


@functools.lru_cache(maxsize=4096)
def text_content(text: str) -> frozenset[str]:
    """The content words of a memory's text: its distinct full terms that are not stopwords.

    Cached: a memory's text is read again when it is compared with a new one (duplicates).
    """
    return frozenset(document_terms(text).full) - STOPWORDS
