"""The `squirrel-mcp` command: its parser and commands, the unlock they share, progress bars."""
