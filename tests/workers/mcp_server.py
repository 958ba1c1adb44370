"""A local MCP server over stdio (mcp's `MCPServer`), for tests/workers/mcp_app.py:
a read-only forecast and a destructive refund taking an idempotency key. Each
call it serves is a line in $SDK_DIR/mcp.log."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.workers.agents_app import log

server = MCPServer("weather-and-refunds")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def forecast(city: str) -> str:
    """Tomorrow's sky in a city."""
    log("mcp.log", f"forecast {city}")
    return f"{city}: rain"


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
def refund(order_id: str, amount: int, idempotency_key: str) -> str:
    """Refund an order (the amount in cents), once per key."""
    log("mcp.log", f"refund {order_id} {amount} {idempotency_key}")
    return f"refunded {amount} on order {order_id}"


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
def refund_and_hang(order_id: str, amount: int, idempotency_key: str) -> str:
    """A refund whose answer never comes back in time: it is made, then the
    server hangs."""
    log("mcp.log", f"refund {order_id} {amount} {idempotency_key}")
    time.sleep(3)
    return f"refunded {amount} on order {order_id}"


if __name__ == "__main__":
    server.run("stdio")
