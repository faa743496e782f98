"""What every layer stands on: what a memory is, the settings, atomic files, stderr lines.

models.py  a memory's fields, its categories and their half-lives, the text rules
config.py  the server's settings, read from the environment at the edges only
files.py   atomic, owner-only writes and private directories
lines.py   the one-line messages on stderr (never a secret or memory text)
"""
