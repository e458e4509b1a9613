# An OpenAI-compatible chat-completions server in Python (another language
# than leasehold's client) with the ordinary failures of real endpoints:
# usage reported as absent, null or zero, and requests refused as longer
# than the model's context window, in llama.cpp's or OpenAI's words.
#
#   python3 openai_peer.py [--usage absent|null|zero|null-fields|reported]
#                          [--context TOKENS --overflow llama|openai]
#                          [--reads N] [--cut-off] [--log FILE]
#
# Prints its port, then serves until killed. A request's tokens, as this
# server counts them, are the characters of its messages' contents over 4.
#
# - With --context, a request of more tokens is refused with HTTP 400 and
#   the body llama.cpp's llama-server (`--overflow llama`) or OpenAI
#   (`--overflow openai`) sends.
# - A JSON-mode request (the evaluator's) is answered WRAP_UP to a budget
#   question, RENEW to a lease's.
# - Otherwise, while the conversation holds fewer than --reads tool
#   results and tools are offered, the answer calls the first tool; then
#   it is a final answer. With --cut-off every answer is 400 characters cut
#   off at the length limit (finish_reason `length`).
# - Streamed when the request asks (`stream`), whole otherwise; usage as
#   --usage says, on every chunk as `null` (as OpenAI does) with `null`.
# - With --log, each request is appended to FILE as one JSON line: its
#   tokens, whether it was refused, and its tool results' contents.
import argparse, json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

parser = argparse.ArgumentParser()
parser.add_argument("--usage", default="reported",
                    choices=["absent", "null", "zero", "null-fields", "reported"])
parser.add_argument("--context", type=int, default=0)
parser.add_argument("--overflow", default="llama", choices=["llama", "openai"])
parser.add_argument("--reads", type=int, default=0)
parser.add_argument("--cut-off", action="store_true")
parser.add_argument("--log")
args = parser.parse_args()


def tokens(body):
    return sum(len(m.get("content") or "") for m in body.get("messages", [])) // 4


def usage(prompt, completion):
    if args.usage == "zero":
        return {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    if args.usage == "null-fields":
        return {"prompt_tokens": None, "completion_tokens": None, "total_tokens": None}
    if args.usage == "reported":
        return {"prompt_tokens": prompt, "completion_tokens": completion,
                "total_tokens": prompt + completion}
    return None


def refusal(requested):
    if args.overflow == "llama":
        return {"error": {
            "code": 400,
            "message": f"request ({requested} tokens) exceeds the available context size "
                       f"({args.context} tokens), try increasing it",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": requested,
            "n_ctx": args.context,
        }}
    return {"error": {
        "message": f"This model's maximum context length is {args.context} tokens. However, "
                   f"your messages resulted in {requested} tokens. Please reduce the length "
                   "of the messages.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }}


def answer(body):
    """The message, and its finish reason."""
    if "response_format" in body:
        system = body["messages"][0]["content"] if body["messages"] else ""
        if "decision" in system:
            text = {"decision": "WRAP_UP", "reason": "the budget is spent", "confidence": 1}
        else:
            text = {"verdict": "RENEW", "reason": "alive", "nudge": None}
        return {"role": "assistant", "content": json.dumps(text)}, "stop"
    results = [m for m in body["messages"] if m.get("role") == "tool"]
    if body.get("tools") and len(results) < args.reads:
        name = body["tools"][0]["function"]["name"]
        call = {"id": f"call_{len(results)}", "type": "function",
                "function": {"name": name, "arguments": json.dumps({"page": len(results)})}}
        return {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
    if args.cut_off:
        return {"role": "assistant", "content": "word " * 80}, "length"
    return {"role": "assistant", "content": f"done after {len(results)} tool results"}, "stop"


def chunk(delta, finish=None):
    data = {"object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if args.usage == "null":
        data["usage"] = None
    return b"data: " + json.dumps(data).encode() + b"\n\n"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *rest):
        pass

    def send(self, status, content_type, data):
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
        prompt = tokens(body)
        refused = bool(args.context) and prompt > args.context
        if args.log:
            with open(args.log, "a") as log:
                log.write(json.dumps({
                    "tokens": prompt, "refused": refused,
                    "evaluator": "response_format" in body,
                    "tool_results": [m.get("content") for m in body["messages"]
                                     if m.get("role") == "tool"],
                }) + "\n")
        if refused:
            return self.send(400, "application/json", json.dumps(refusal(prompt)).encode())
        message, finish = answer(body)
        completion = len(message.get("content") or "") // 4
        reported = usage(prompt, completion)
        if not body.get("stream"):
            whole = {"object": "chat.completion",
                     "choices": [{"index": 0, "message": message, "finish_reason": finish}]}
            if args.usage != "absent":
                whole["usage"] = reported
            return self.send(200, "application/json", json.dumps(whole).encode())
        out = [chunk({"role": "assistant"})]
        if message.get("content"):
            text = message["content"]
            for at in range(0, len(text), 40):
                out.append(chunk({"content": text[at:at + 40]}))
        if message.get("tool_calls"):
            calls = [dict(call, index=n) for n, call in enumerate(message["tool_calls"])]
            out.append(chunk({"tool_calls": calls}))
        out.append(chunk({}, finish))
        if args.usage != "absent":
            out.append(b"data: " + json.dumps({"object": "chat.completion.chunk", "choices": [],
                                               "usage": reported}).encode() + b"\n\n")
        out.append(b"data: [DONE]\n\n")
        self.send(200, "text/event-stream", b"".join(out))


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
