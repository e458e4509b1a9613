"""A webhook receiver for the tests: verifies each request with the
Standard Webhooks reference library (`standardwebhooks` on PyPI) and
appends what it received to a JSON-lines log, flushed to disk before it
answers.

    python webhook_receiver.py PORT SECRET LOG MODE

MODE `ok` answers 204 to a request whose signature holds (400 otherwise);
MODE `hang` logs the request and never answers, so that a test can kill
the receiver in the middle of a delivery. Prints `listening PORT` once it
accepts connections.
"""

import http.server
import json
import os
import sys
import threading

from standardwebhooks import Webhook

port, secret, log_path, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
webhook = Webhook(secret)
lock = threading.Lock()


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        headers = {name.lower(): value for name, value in self.headers.items()}
        record = {
            "mode": mode,
            "path": self.path,
            "id": headers.get("webhook-id"),
            "timestamp": headers.get("webhook-timestamp"),
            "signature": headers.get("webhook-signature"),
        }
        try:
            record["payload"] = webhook.verify(body, headers)
            record["verified"] = True
        except Exception as error:  # what was wrong is the test's to show
            record["verified"] = False
            record["error"] = f"{type(error).__name__}: {error}"
        with lock:
            with open(log_path, "a", encoding="utf-8") as log:
                log.write(json.dumps(record) + "\n")
                log.flush()
                os.fsync(log.fileno())
        if mode == "hang":
            threading.Event().wait()
        self.send_response(204 if record["verified"] else 400)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
server.daemon_threads = True
print(f"listening {port}", flush=True)
server.serve_forever()
