"""An OpenAI-compatible model for end-to-end runs, in another language
than leasehold: it plays an agent that calls one tool and then answers, and
a judge, and writes down every request it is sent.

    agent_model.py JOURNAL [--tool NAME --arguments JSON] [--verdict V]
                   [--first-ms N] [--slow-marker WORD]

- A loop's request with tools and no tool result yet is answered with a
  call of `--tool` (when given) with `--arguments`; any other loop request
  with the text "done.". A request whose last user message holds
  `--slow-marker` waits `--first-ms` before its first chunk; others answer
  at once.
- A judge's request (the watchdog's or a budget checkpoint's system
  prompt) is answered with the verdict `--verdict` (INTERVENE by default):
  a strict judge.
- Each request is appended to JOURNAL as one JSON line: whether it was a
  judge's, its `max_tokens`, whether it asked to be streamed.
"""
import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

parser = argparse.ArgumentParser()
parser.add_argument("journal")
parser.add_argument("--tool")
parser.add_argument("--arguments", default="{}")
parser.add_argument("--verdict", default="INTERVENE")
parser.add_argument("--first-ms", type=int, default=0)
parser.add_argument("--slow-marker", default="SLOW")
options = parser.parse_args()
lock = threading.Lock()


def journal(entry):
    with lock:
        with open(options.journal, "a") as out:
            out.write(json.dumps(entry) + "\n")


def chunk(delta, finish=None):
    event = {
        "id": "m",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return ("data: " + json.dumps(event) + "\n\n").encode()


class Model(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))) or b"{}")
        messages = body.get("messages", [])
        system = messages[0].get("content", "") if messages else ""
        judge = system.startswith("You are the watchdog") or system.startswith(
            "You are the budget checkpoint"
        )
        journal({
            "judge": judge,
            "max_tokens": body.get("max_tokens"),
            "stream": bool(body.get("stream")),
        })
        if judge:
            if system.startswith("You are the watchdog"):
                text = json.dumps({"verdict": options.verdict, "reason": "strict", "nudge": None})
            else:
                text = json.dumps({"decision": "WRAP_UP", "reason": "strict", "confidence": 1})
            return self.answer(body, {"content": text}, "stop")
        users = [m for m in messages if m.get("role") == "user"]
        last_user = users[-1].get("content", "") if users else ""
        if options.slow_marker in str(last_user):
            time.sleep(options.first_ms / 1000.0)
        called = any(m.get("role") == "tool" for m in messages)
        if options.tool and body.get("tools") and not called:
            call = {
                "index": 0,
                "id": "call-1",
                "type": "function",
                "function": {"name": options.tool, "arguments": options.arguments},
            }
            return self.answer(body, {"tool_calls": [call]}, "tool_calls")
        return self.answer(body, {"content": "done."}, "stop")

    def answer(self, body, delta, finish):
        try:
            if body.get("stream"):
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("connection", "close")
                self.end_headers()
                self.wfile.write(chunk(dict(delta, role="assistant")))
                self.wfile.write(chunk({}, finish))
                usage = {"id": "m", "object": "chat.completion.chunk", "choices": [],
                         "usage": {"prompt_tokens": 10, "completion_tokens": 5}}
                self.wfile.write(("data: " + json.dumps(usage) + "\n\ndata: [DONE]\n\n").encode())
                self.wfile.flush()
            else:
                message = dict(delta, role="assistant")
                answer = {
                    "id": "m",
                    "object": "chat.completion",
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 5},
                }
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Model)
server.daemon_threads = True
print(server.server_address[1], flush=True)
server.serve_forever()
