"""The `squirrel-mcp` command.

main.py      the parser and `main`, the script's entry point
unlock.py    how every command (and the server) opens the vault or sync account; error lines
account.py   `init` and `passphrase`
backup.py    `export` and `import`
serve.py     serving MCP over stdio (the default command) and the page (`ui`)
browse.py    `search`, `list`, `show`: the server's own tools, called in process
doctor.py    `doctor`: one line per check, each with its fix
hosts.py     the MCP hosts' config files `doctor` reads, and their squirrel-mcp entries
progress.py  the progress bar on a terminal
"""
