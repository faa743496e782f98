"""Words left out of `lexicalScore`: they say little about what a query is after.

English only, folded as the tokenizer folds. Stopwords still count towards BM25
(their inverse document frequency keeps them small); they only stop a memory
from matching on them alone and do not count in the share of query words held.
Other languages' stopword lists collide with English content words (German
"die", "war"; French "pour"), so they are left out rather than guessed at.
"""

from __future__ import annotations

_ENGLISH = """
a about an and are as at be been but by can could did do does for from had has have he her
hers him his how i if in into is it its me my no not of on or our ours she so than that the
their theirs them then there these they this those to too us was we were what when where
which who whom why will with would you your yours
"""
STOPWORDS = frozenset(_ENGLISH.split())
