"""Search by words, and what a ranker is handed and answers.

index.py    the inverted index of every memory's current revision (compact arrays)
bm25.py     BM25 x the category's recency decay over that index: the candidates
ranking.py  what a ranker gets (`Candidate`, `RankOptions`) and answers (`Ranking`),
and `check_ranking`, the rules an answer must keep
"""
