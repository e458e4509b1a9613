"""An OpenAI-compatible model for the client's tests, served on a loopback
port by a thread of the test process: `leasehold serve` calls it as it
would call any model. What it answers is scripted by markers in the run's
messages, so that each test's run goes where the test needs it:

- `gate:NAME` — the answer waits until the test opens the gate `NAME`
  ([`ScriptedModel.open`]); a run's model call is then in flight for as
  long as the test needs, without a timer.
- `text-gate:NAME` — the first words of the answer are streamed at once,
  the rest once the gate `NAME` opens.
- `charge-order` — the first call (before any tool result, and unless a
  person said `GO-AHEAD`) answers a call of
  the tool `charge`.
- `GO-AHEAD` anywhere in the messages (a person's guidance or message) —
  the answer comes at once, whatever gate the task names.

A judge's request (the watchdog's, a budget checkpoint's) is answered
INTERVENE (WRAP_UP). Every request's messages are kept, to be asked
([`ScriptedModel.saw`]).
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, List

ANSWER = ["The answer ", "is ", "forty-two."]
#: The whole answer of a run that ends at its first model call.
ANSWER_TEXT = "".join(ANSWER)
#: How long a gate holds at most: past it the test has failed anyway.
GATE_PATIENCE = 60.0


def _chunk(delta, finish=None) -> bytes:
    event = {
        "id": "m",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return ("data: " + json.dumps(event) + "\n\n").encode()


class ScriptedModel:
    def __init__(self) -> None:
        self._gates: Dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self.requests: List[str] = []
        model = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                length = int(self.headers.get("content-length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                try:
                    model._answer(self, body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def gate(self, name: str) -> threading.Event:
        with self._lock:
            return self._gates.setdefault(name, threading.Event())

    def open(self, name: str) -> None:
        """Lets the answers waiting on the gate `name` go on."""
        self.gate(name).set()

    def saw(self, text: str) -> bool:
        """Whether a request of a loop held `text` in its messages."""
        with self._lock:
            return any(text in request for request in self.requests)

    def stop(self) -> None:
        with self._lock:
            for gate in self._gates.values():
                gate.set()
        self._server.shutdown()
        self._server.server_close()

    def _answer(self, handler, body) -> None:
        messages = body.get("messages", [])
        system = str(messages[0].get("content", "")) if messages else ""
        if system.startswith("You are the watchdog"):
            verdict = {"verdict": "INTERVENE", "reason": "scripted", "nudge": None}
            return self._send(handler, body, [json.dumps(verdict)], "stop")
        if system.startswith("You are the budget checkpoint"):
            decision = {"decision": "WRAP_UP", "reason": "scripted", "confidence": 1}
            return self._send(handler, body, [json.dumps(decision)], "stop")
        said = json.dumps(messages)
        with self._lock:
            self.requests.append(said)
        answered_by_person = "GO-AHEAD" in said
        called = any(m.get("role") == "tool" for m in messages)
        if "charge-order" in said and body.get("tools") and not called and not answered_by_person:
            call = {
                "index": 0,
                "id": "call-1",
                "type": "function",
                "function": {"name": "charge", "arguments": json.dumps({"order": "7"})},
            }
            return self._send(handler, body, None, "tool_calls", tool_calls=[call])
        gate = re.search(r"(?<![\w-])gate:([\w-]+)", said)
        if gate and not answered_by_person:
            self.gate(gate.group(1)).wait(GATE_PATIENCE)
        text_gate = re.search(r"text-gate:([\w-]+)", said)
        held = None if answered_by_person or not text_gate else self.gate(text_gate.group(1))
        self._send(handler, body, ANSWER, "stop", hold_after_first=held)

    def _send(self, handler, body, pieces, finish, tool_calls=None, hold_after_first=None):
        if not body.get("stream"):
            message = {"role": "assistant", "content": "".join(pieces or [])}
            if tool_calls:
                message["tool_calls"] = [
                    {k: v for k, v in call.items() if k != "index"} for call in tool_calls
                ]
            answer = {
                "id": "m",
                "object": "chat.completion",
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5},
            }
            data = json.dumps(answer).encode()
            handler.send_response(200)
            handler.send_header("content-type", "application/json")
            handler.send_header("content-length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
            return
        handler.send_response(200)
        handler.send_header("content-type", "text/event-stream")
        handler.send_header("connection", "close")
        handler.end_headers()
        if tool_calls:
            handler.wfile.write(_chunk({"role": "assistant", "tool_calls": tool_calls}))
        for i, piece in enumerate(pieces or []):
            delta = {"content": piece}
            if i == 0:
                delta["role"] = "assistant"
            handler.wfile.write(_chunk(delta))
            handler.wfile.flush()
            if i == 0 and hold_after_first is not None:
                hold_after_first.wait(GATE_PATIENCE)
        handler.wfile.write(_chunk({}, finish))
        usage = {
            "id": "m",
            "object": "chat.completion.chunk",
            "choices": [],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5},
        }
        handler.wfile.write(("data: " + json.dumps(usage) + "\n\ndata: [DONE]\n\n").encode())
        handler.wfile.flush()
