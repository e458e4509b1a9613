"""An MCP server over stdio (newline-delimited JSON-RPC) with one tool,
`charge`, annotated as not idempotent, whose calls are never answered: a
call of it hangs until leasehold stops it, and its outcome is then
unknown."""

import json
import sys


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    if not line.strip():
        continue
    request = json.loads(line)
    method, rid = request.get("method"), request.get("id")
    if rid is None or method == "tools/call":
        continue
    params = request.get("params") or {}
    if method == "initialize":
        result = {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "ledger", "version": "1"},
        }
    elif method == "tools/list":
        result = {
            "tools": [
                {
                    "name": "charge",
                    "description": "Charge an order. Takes money.",
                    "inputSchema": {
                        "type": "object",
                        "properties": {"order": {"type": "string"}},
                    },
                    "annotations": {"idempotentHint": False, "destructiveHint": True},
                }
            ]
        }
    else:
        result = {}
    send({"jsonrpc": "2.0", "id": rid, "result": result})
