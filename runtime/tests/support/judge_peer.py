"""An OpenAI-compatible judge that is slow on purpose, in another language
than leasehold: it records every request it is sent, answers each as the
command line says, counts how many it serves at once, and notices when a
client goes away before the answer is whole (a write that fails).

    judge_peer.py MODE DELAY_MS

MODE is `verdict` (a streamed RENEW verdict, DELAY_MS before each of its
chunks) or `endless` (a chunk of a verdict that never ends, one every
DELAY_MS, until the client leaves). GET /stats answers what it saw.
"""
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODE = sys.argv[1]
DELAY = int(sys.argv[2]) / 1000.0
VERDICT = '{"verdict": "RENEW", "reason": "alive", "nudge": null}'

lock = threading.Lock()
stats = {"requests": [], "in_flight": 0, "max_in_flight": 0, "left": 0}


def chunk(text):
    event = {
        "id": "j",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
    }
    return ("data: " + json.dumps(event) + "\n\n").encode()


class Judge(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        with lock:
            body = json.dumps(stats).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        length = int(self.headers.get("content-length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        with lock:
            stats["requests"].append(
                {
                    "max_tokens": body.get("max_tokens"),
                    "stream": body.get("stream", False),
                }
            )
            stats["in_flight"] += 1
            stats["max_in_flight"] = max(stats["max_in_flight"], stats["in_flight"])
        counted = [True]

        def out_of_flight():
            # Before the last bytes leave: a client that has read them may
            # send its next request before this thread runs again.
            with lock:
                if counted[0]:
                    stats["in_flight"] -= 1
                    counted[0] = False

        try:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("connection", "close")
            self.end_headers()
            if MODE == "verdict":
                for piece in (VERDICT[:20], VERDICT[20:]):
                    time.sleep(DELAY)
                    self.wfile.write(chunk(piece))
                    self.wfile.flush()
                done = {
                    "id": "j",
                    "object": "chat.completion.chunk",
                    "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                }
                out_of_flight()
                self.wfile.write(("data: " + json.dumps(done) + "\n\ndata: [DONE]\n\n").encode())
                self.wfile.flush()
            else:
                self.wfile.write(chunk('{"verdict": "RENEW", "reason": "'))
                self.wfile.flush()
                while True:
                    time.sleep(DELAY)
                    self.wfile.write(chunk("and so on "))
                    self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            with lock:
                stats["left"] += 1
        finally:
            out_of_flight()
            self.close_connection = True


server = ThreadingHTTPServer(("127.0.0.1", 0), Judge)
server.daemon_threads = True
print(server.server_address[1], flush=True)
server.serve_forever()
