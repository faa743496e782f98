"""squirrel-mcp: a private, encrypted memory for AI agents, served over MCP stdio."""

# The one place the version is written: both distributions' build metadata read it
# (hatch_build.py), and the `embeddings` extra pins the plugin to it exactly.
__version__ = "0.1.0"
