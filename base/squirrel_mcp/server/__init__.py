"""The MCP surface.

app.py        the MCP server: every tool bound to its context, the skill as a prompt
tools.py      the tools: typed functions over a `ToolContext`, and `TOOLS` (titles, hints)
searching.py  `run_search`, what search_memory answers; no MCP import (the CLI, the page use it)
opening.py    the store as it opens in the background, which tool calls wait for
results.py    the tools' structured outputs
stdio.py      the stdio transport
"""
