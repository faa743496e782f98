"""The `squirrel-mcp` command.

entry.py     the script's entry point: a host's bridge starts there, the rest goes to main.py
main.py      the parser and `main`
unlock.py    how every command (and the server) opens the vault or sync account; error lines
account.py   `init` and `passphrase`
backup.py    `export` and `import`
serve.py     serving MCP over stdio (the default command) and the page (`ui`)
bridge.py    a host's bridge to the vault's one memory process (unless SQUIRREL_MCP_SHARED=0)
starting.py  how a bridge starts the memory process (nothing of the host's folder), and its log
memory_process.py  the memory process serving every bridge of a vault
admission.py  whom the memory process admits, and a passphrase changed while it serves
background.py  the unlock in a thread, for both servers
browse.py    `search`, `list`, `show`: the server's own tools, called in process
doctor.py    `doctor`: one line per check, each with its fix
hosts.py     the MCP hosts' config files `doctor` reads, and their squirrel-mcp entries
host_checks.py  `doctor`'s line for each of those entries (or for none)
entry_unlock.py  whether an entry's account unlocks with its own env and the keychain
progress.py  the progress bar on a terminal
"""
