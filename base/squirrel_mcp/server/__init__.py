"""The MCP surface: the tools an agent calls, their structured results, the stdio transport."""
