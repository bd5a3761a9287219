"""The yardstick of bench/startup.py: a one-tool MCP server on the same SDK, with nothing of jobtrail's."""

from mcp.server.mcpserver import MCPServer

server = MCPServer(name="minimal")


@server.tool()
def ping() -> str:
    """Answer pong."""
    return "pong"


if __name__ == "__main__":
    server.run()
