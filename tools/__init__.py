"""Tools that agents call: the registry, built-in tools, and the MCP bridge."""
