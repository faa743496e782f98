"""The memory book: the decrypted memories with their history, over any storage backend.

memories.py       `MemoryStore`: unlocks, pulls and decrypts the log, writes revisions
snapshot.py       the sealed snapshot of the decrypted state a reopen starts from
catalog.py        every memory's current revision in order, with indexes for the listings
checkpoint.py     the log's hash chain and this machine's sealed checkpoint of it
rekey.py          a passphrase change: the data key wrapped again
transfer.py       export and import
server_memory.py  import from the official memory server's JSONL
"""
