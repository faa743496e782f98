"""`python -m squirrel_mcp.syncserver` runs the command line, as `squirrel-mcp-sync` does."""

from squirrel_mcp.syncserver.cli import main

raise SystemExit(main())
