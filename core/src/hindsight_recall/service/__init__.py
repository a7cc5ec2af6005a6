"""The service face of the engine: HTTP and MCP servers over one warm engine."""
