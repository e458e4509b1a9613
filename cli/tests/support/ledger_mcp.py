# An MCP server over stdio (newline-delimited JSON-RPC) in Python, another
# language than leasehold's client: one tool, `charge`, annotated as not
# idempotent; each call's tool, idempotency key and traceparent (in `_meta`) appended,
# as one JSON line, to the file named by its first argument before it
# answers.
import json, sys

ledger = sys.argv[1]

def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()

for line in sys.stdin:
    if not line.strip():
        continue
    request = json.loads(line)
    method, rid = request.get("method"), request.get("id")
    if rid is None:
        continue
    params = request.get("params") or {}
    if method == "initialize":
        result = {"protocolVersion": params.get("protocolVersion", "2025-06-18"),
                  "capabilities": {"tools": {}},
                  "serverInfo": {"name": "ledger", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "charge", "description": "Charge an order. Takes money.",
                             "inputSchema": {"type": "object",
                                             "properties": {"order": {"type": "string"}}},
                             "annotations": {"idempotentHint": False, "destructiveHint": True,
                                             "readOnlyHint": False}}]}
    elif method == "tools/call":
        meta = params.get("_meta") or {}
        key = meta.get("leasehold/idempotency_key")
        with open(ledger, "a") as f:
            f.write(json.dumps({"tool": params.get("name"), "key": key,
                                "traceparent": meta.get("traceparent")}) + "\n")
        result = {"content": [{"type": "text", "text": "charged order 7"}], "isError": False}
    else:
        result = {}
    send({"jsonrpc": "2.0", "id": rid, "result": result})
