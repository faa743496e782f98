"""The reference sync server: the remote storage API of openapi.yaml (here), self-hostable.

squirrel-mcp on several machines shares one account through this server. It
stores exactly what the local vault stores (the account's KDF salt and
parameters, its wrapped data key and key-change verifier, and one sealed record
per memory revision), and the account keys each account held before, and never
receives a passphrase, a key or plaintext. It replaces an account's key only for
a request that proves it holds the data key (the key-change proof), which no
API key gives.

    keys.py        API keys: making one, hashing it, its display prefix, reading the bearer header
    schema.py      the tables and their version, and the SQL that differs between SQLite and PostgreSQL
    pool.py        connections and transactions to SQLite (one machine) or PostgreSQL (same code)
    keystore.py    the slots and the API keys that open them: issue, list, revoke, look up
    database.py    the store (a KeyStore): opening it, the accounts, their keys and sealed records
    validation.py  request bodies checked by the wire models (storage/wire.py), and the query
    ratelimit.py   per-key request budgets (token buckets)
    app.py         the Starlette application: routes, authentication, error bodies
    cli.py         `squirrel-mcp-sync serve`, the API key commands, and the account key ones
                   (list-account-keys, restore-account-key, forget-account-keys, clear-verifier)

openapi.yaml here is the contract, the one copy in the repository; the server
serves it at /v1/openapi.yaml. Its schemas are those of the wire models in
`squirrel_mcp.storage.wire` (tests/sync/test_wire_models.py checks that they agree).

The server needs the `server` extra (Starlette, uvicorn, anyio):
pip install 'squirrel-mcp[server]'.
"""
