"""The model both sides call: an OpenAI-compatible `POST /v1/chat/completions`
that streams every answer as the same server-sent chunks (`--chunks` content
chunks, one per `--chunk-ms` tick), whatever the request asks.

It is written on asyncio's bare protocol, not on a web framework, so that it
costs as little as it can: one timer for every stream (a tick every
`--chunk-ms` writes the next chunk of every open stream), HTTP/1.1 keep-alive
with chunked bodies, no per-stream task. `GET /stats` answers the calls it
served (streamed and not) and its own CPU seconds, so a side's model calls
per run are counted, not assumed.

    python model.py --port-file F [--chunks 25] [--chunk-ms 20]
"""

import argparse
import asyncio
import json
import os
import resource

ROLE = {"role": "assistant", "content": ""}


def frame(body: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(body), body)


def sse(delta, finish=None, usage=None) -> bytes:
    chunk = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "bench",
        "choices": [] if usage else [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage:
        chunk["usage"] = usage
    return frame(b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n")


class Streams:
    """Every open stream and the tick that feeds them."""

    def __init__(self, chunks: int, chunk_s: float):
        self.chunks = chunks
        self.chunk_s = chunk_s
        self.open = {}  # transport -> [chunks left, include_usage, protocol]
        self.calls = 0
        self.streamed = 0
        self.content = sse({"content": "done "})
        self.first = sse(ROLE)
        self.stop = sse({}, "stop")
        usage = {"prompt_tokens": 10, "completion_tokens": chunks, "total_tokens": 10 + chunks}
        self.usage = sse(None, usage=usage)
        self.done = frame(b"data: [DONE]\n\n") + b"0\r\n\r\n"
        self.text = "done " * chunks
        self.usage_obj = usage

    async def tick(self):
        while True:
            await asyncio.sleep(self.chunk_s)
            ended = []
            for transport, state in self.open.items():
                if transport.is_closing():
                    ended.append(transport)
                    continue
                state[0] -= 1
                if state[0] > 0:
                    transport.write(self.content)
                else:
                    tail = self.content + self.stop + (self.usage if state[1] else b"") + self.done
                    transport.write(tail)
                    ended.append(transport)
            for transport in ended:
                state = self.open.pop(transport)
                state[2].busy = False
                state[2].serve_buffered()


class Http(asyncio.Protocol):
    def __init__(self, streams: Streams):
        self.streams = streams
        self.buffer = b""
        self.busy = False
        self.transport = None

    def connection_made(self, transport):
        self.transport = transport

    def connection_lost(self, exc):
        self.streams.open.pop(self.transport, None)

    def data_received(self, data):
        self.buffer += data
        self.serve_buffered()

    def serve_buffered(self):
        while not self.busy and not self.transport.is_closing():
            head_end = self.buffer.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = self.buffer[:head_end].decode("latin-1").split("\r\n")
            length = 0
            for line in head[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip())
            if len(self.buffer) < head_end + 4 + length:
                return
            body = self.buffer[head_end + 4 : head_end + 4 + length]
            self.buffer = self.buffer[head_end + 4 + length :]
            method, path = head[0].split(" ")[:2]
            self.answer(method, path, body)

    def send(self, status: str, kind: str, body: bytes):
        self.transport.write(
            b"HTTP/1.1 %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n%s"
            % (status.encode(), kind.encode(), len(body), body)
        )

    def answer(self, method, path, body):
        streams = self.streams
        if method == "GET" and path == "/stats":
            usage = resource.getrusage(resource.RUSAGE_SELF)
            stats = {"calls": streams.calls, "streamed": streams.streamed,
                     "cpu_s": usage.ru_utime + usage.ru_stime, "open": len(streams.open)}
            self.send("200 OK", "application/json", json.dumps(stats).encode())
            return
        if method != "POST" or not path.endswith("/chat/completions"):
            self.send("404 Not Found", "application/json", b'{"error":{"message":"no route"}}')
            return
        request = json.loads(body or b"{}")
        streams.calls += 1
        if not request.get("stream"):
            answer = {
                "id": "chatcmpl-bench", "object": "chat.completion", "created": 0, "model": "bench",
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": streams.text}}],
                "usage": streams.usage_obj,
            }
            self.send("200 OK", "application/json", json.dumps(answer).encode())
            return
        streams.streamed += 1
        include_usage = bool((request.get("stream_options") or {}).get("include_usage"))
        self.transport.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n" + streams.first
        )
        self.busy = True
        streams.open[self.transport] = [streams.chunks, include_usage, self]


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port-file", required=True)
    parser.add_argument("--chunks", type=int, default=25)
    parser.add_argument("--chunk-ms", type=float, default=20)
    args = parser.parse_args()
    streams = Streams(args.chunks, args.chunk_ms / 1000)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Http(streams), "127.0.0.1", 0, backlog=4096)
    port = server.sockets[0].getsockname()[1]
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(port))
    os.replace(tmp, args.port_file)
    ticker = asyncio.create_task(streams.tick())
    async with server:
        await asyncio.gather(server.serve_forever(), ticker)


if __name__ == "__main__":
    asyncio.run(main())
