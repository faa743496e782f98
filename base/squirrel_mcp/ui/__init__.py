"""`squirrel-mcp ui`: a private page on 127.0.0.1 to see, search, correct and forget memories.

It unlocks the same vault or sync account as the server and works on the same
MemoryStore, so the encryption, the history and the conflict checks are the
server's own. `serve` runs it; `app` is the Starlette application; `guard` keeps
everyone but the browser that opened the printed URL out; `pages` renders the
list and search and `memory_page` one memory, with times from `when`; `outcomes`
keeps a refused form's outcome for the page its redirect leads to.
"""
