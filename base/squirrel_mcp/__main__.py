"""`python -m squirrel_mcp` runs the command line, as the `squirrel-mcp` script does."""

from squirrel_mcp.cli.entry import main

raise SystemExit(main())
