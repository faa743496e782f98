"""Text for search: folding, words in any script, character pairs, stopwords.

`tokens` turns a memory's fields or a query into the terms the index holds;
`stopwords` lists the words left out of `lexicalScore`.
"""
