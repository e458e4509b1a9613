"""httpx transports that cut a run's event stream: the first connection to
`/runs/{id}/events` ends after `after_bytes` bytes (mid-frame, as a
dropped connection does), the next ones are let through. Each records the
`Last-Event-ID` every connection of the stream was opened with."""

from __future__ import annotations

from typing import List, Optional

import httpx


class _CutStream(httpx.SyncByteStream):
    def __init__(self, inner: httpx.SyncByteStream, after_bytes: int) -> None:
        self._inner = inner
        self._left = after_bytes

    def __iter__(self):
        for chunk in self._inner:
            if len(chunk) >= self._left:
                yield chunk[: self._left]
                raise httpx.ReadError("the test cut the connection")
            self._left -= len(chunk)
            yield chunk

    def close(self) -> None:
        self._inner.close()


class _AsyncCutStream(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, after_bytes: int) -> None:
        self._inner = inner
        self._left = after_bytes

    async def __aiter__(self):
        async for chunk in self._inner:
            if len(chunk) >= self._left:
                yield chunk[: self._left]
                raise httpx.ReadError("the test cut the connection")
            self._left -= len(chunk)
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class _Cuts:
    def __init__(self, after_bytes: int) -> None:
        self.after_bytes = after_bytes
        #: The `Last-Event-ID` of each connection to an event stream.
        self.last_event_ids: List[Optional[str]] = []

    def _cut_this(self, request: httpx.Request) -> bool:
        if not request.url.path.endswith("/events"):
            return False
        self.last_event_ids.append(request.headers.get("last-event-id"))
        return len(self.last_event_ids) == 1


class CutOnce(_Cuts, httpx.BaseTransport):
    def __init__(self, after_bytes: int) -> None:
        super().__init__(after_bytes)
        self._inner = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self._inner.handle_request(request)
        if not self._cut_this(request):
            return response
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_CutStream(response.stream, self.after_bytes),
            extensions=response.extensions,
        )

    def close(self) -> None:
        self._inner.close()


class AsyncCutOnce(_Cuts, httpx.AsyncBaseTransport):
    def __init__(self, after_bytes: int) -> None:
        super().__init__(after_bytes)
        self._inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        if not self._cut_this(request):
            return response
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_AsyncCutStream(response.stream, self.after_bytes),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()
