"""The reference sync server: the remote storage API of docs/api/openapi.yaml, self-hostable.

squirrel-mcp on several machines shares one account through this server. It
stores exactly what the local vault stores (the account's KDF salt and
parameters, its wrapped data key, and one sealed record per memory revision)
and never receives a passphrase, a key or plaintext.

    keys.py        API keys: making one, hashing it, reading the bearer header
    database.py    the store, on SQLite (one machine) or PostgreSQL (same code)
    validation.py  every request body and query parameter checked against the contract
    ratelimit.py   per-key request budgets (token buckets)
    app.py         the Starlette application: routes, authentication, error bodies
    cli.py         `squirrel-mcp-sync serve` and `squirrel-mcp-sync issue-key`

openapi.yaml here is the contract, byte for byte the same as docs/api/openapi.yaml
(a test says so); the server serves it at /v1/openapi.yaml.
"""
