"""Common English words: they say little about what a query is after.

A standard English list (the 179 words of NLTK's, the one most search tools start
from) and three more that this project's earlier list had ("could", "would", "us"),
folded as the tokenizer folds: 155 terms, since the list's 25 contractions are pieces
here. The tokenizer cuts
a word at an apostrophe, so a contraction leaves pieces ("landlord's" gives
"landlord" and "s", "don't" gives "don" and "t"): those pieces are on the list too,
or a query holding "'s" would match every memory holding one. "won" (of "won't") is
left off: it is also the past of "win", a word people search for.

Stopwords never make a memory a hit on their own and do not count in
`lexicalScore`; they still add to BM25 where a content word matched (their inverse
document frequency keeps them small), and a query made only of them gets a note
instead of hits. Other languages' stopword lists collide with English content words
(German "die", "war"; French "pour"), so they are left out rather than guessed at.
"""

from __future__ import annotations

_ENGLISH = """
a about above after again against all am an and any are as at be because been before
being below between both but by can could did do does doing down during each few for from
further had has have having he her here hers herself him himself his how i if in into is
it its itself just me more most my myself no nor not now of off on once only or other our
ours ourselves out over own same she should so some such than that the their theirs them
themselves then there these they this those through to too under until up us very was we
were what when where which while who whom why will with would you your yours yourself
yourselves
"""
# What a contraction leaves once the tokenizer cuts it at the apostrophe: she's, it's,
# you'll, we've, they're, I'd, I'm, and the negations (aren't ... wouldn't; not won't).
_CONTRACTION_PIECES = """
s t ll ve re d m o y ain aren couldn didn doesn don hadn hasn haven isn ma mightn mustn
needn shan shouldn wasn weren wouldn
"""
STOPWORDS = frozenset(_ENGLISH.split()) | frozenset(_CONTRACTION_PIECES.split())
