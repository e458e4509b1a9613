"""A proxy in front of a real OpenAI-compatible server, in another language
than leasehold: it passes every request and answer through as they come,
byte by byte for a stream, and writes down each request it passes.

    recording_proxy.py UPSTREAM_PORT JOURNAL

Each request is appended to JOURNAL as one JSON line: whether it was a
judge's (the watchdog's or a budget checkpoint's system prompt), its
`max_tokens`, whether it asked to be streamed, and the text of its
messages (`said`, their contents one a line, the last 4000 characters);
once the first bytes of a loop's answer passed, a line
{"first_bytes": true}; and when the client left before the answer's end,
a line {"cut": true}. When the client
goes away the upstream connection is closed, as the client's own would be.
"""
import http.client
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

UPSTREAM = int(sys.argv[1])
JOURNAL = sys.argv[2]
lock = threading.Lock()


def journal(entry):
    with lock:
        with open(JOURNAL, "a") as out:
            out.write(json.dumps(entry) + "\n")


class Proxy(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.forward(None)

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        self.forward(body)

    def forward(self, body):
        judge = False
        if body is not None:
            request = json.loads(body or b"{}")
            messages = request.get("messages", [])
            system = str(messages[0].get("content", "")) if messages else ""
            judge = system.startswith("You are the watchdog") or system.startswith(
                "You are the budget checkpoint"
            )
            contents = "\n".join(str(m.get("content", "")) for m in messages)
            journal({
                "judge": judge,
                "max_tokens": request.get("max_tokens"),
                "stream": bool(request.get("stream")),
                "said": contents[-4000:],
            })
        upstream = http.client.HTTPConnection("127.0.0.1", UPSTREAM, timeout=600)
        headers = {"content-type": "application/json"}
        upstream.request(self.command, self.path, body=body, headers=headers)
        answer = upstream.getresponse()
        try:
            self.send_response(answer.status)
            for name, value in answer.getheaders():
                if name.lower() not in ("transfer-encoding", "connection", "content-length"):
                    self.send_header(name, value)
            self.send_header("connection", "close")
            self.end_headers()
            said = False
            while True:
                data = answer.read1(65536)
                if not data:
                    break
                self.wfile.write(data)
                self.wfile.flush()
                if not said and not judge and body is not None:
                    said = True
                    journal({"first_bytes": True})
        except (BrokenPipeError, ConnectionResetError):
            journal({"cut": True, "judge": judge})
        finally:
            upstream.close()
            self.close_connection = True


server = ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
server.daemon_threads = True
print(server.server_address[1], flush=True)
server.serve_forever()
