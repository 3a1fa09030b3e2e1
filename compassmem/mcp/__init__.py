"""The MCP server: the memory's tools for agents."""
