"""The service face of the engine: HTTP and MCP servers over one warm engine.

Importing this package loads nothing heavy: :mod:`.app` builds the HTTP application
(``hindsight-recall serve``), :mod:`.mcp` the MCP server, and :mod:`.client` is the thin HTTP
client the command line uses with ``--url``.
"""
