"""Resource limits of the HTTP surface: request bodies, event streams, Host.

The seeds bound the engine's own queues (seed 000_81a5c720b14d934a.txt,
"Topology and limits": per-queue concurrency is no admission quota and no
throttle for slow subscribers), so what one client may hold open or send
is bounded here, at the edge, before the engine sees anything:

- `BodyLimit`: a request body larger than `HttpLimits.max_body_bytes` is
  answered 413 with an ErrorBody. A declared `Content-Length` over the limit
  is refused before a byte is read; a chunked body is counted as it arrives
  and refused the moment it passes the limit, so it is never buffered whole.
- `StreamSlots`: at most `streams_per_run` open event streams on one Run and
  `streams_per_principal` for one principal; the next one is answered 429.
  A slot is released when its response ends, however it ends.
- `LoopbackHostOnly`: a server without credentials (`--insecure-local`)
  answers only requests whose Host names a loopback address, so a web page
  cannot reach it through DNS rebinding; others get 421 with an ErrorBody.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from uuid import UUID

from starlette.types import ASGIApp, Message, Receive, Scope, Send

LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})


@dataclass(frozen=True)
class HttpLimits:
    max_body_bytes: int = 1024 * 1024
    streams_per_run: int = 16
    streams_per_principal: int = 64

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "streams_per_run", "streams_per_principal"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")


def _error(status: int, error: str, reason: str, field: str | None = None,
           headers: dict[str, str] | None = None) -> list[Message]:
    body = {"error": error, "reason": reason} | ({"field": field} if field else {})
    raw = json.dumps(body).encode()
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())]
    head += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    return [{"type": "http.response.start", "status": status, "headers": head},
            {"type": "http.response.body", "body": raw}]


async def send_error(send: Send, status: int, error: str, reason: str,
                     field: str | None = None, headers: dict[str, str] | None = None) -> None:
    for message in _error(status, error, reason, field, headers):
        await send(message)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return str(value.decode("latin-1"))
    return None


class BodyLimit:
    """Refuses request bodies over `limit` bytes with 413 (see the module doc)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _header(scope, b"content-length")
        if declared is not None and declared.strip().isdigit() and int(declared) > self.limit:
            await send_error(send, 413, "too_large", self._reason(), "body")
            return
        seen = 0
        refused = False

        async def counting() -> Message:
            nonlocal seen, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    # Answer now, before the app has buffered the body; the app
                    # sees a disconnect and anything it sends after is dropped.
                    refused = True
                    await send_error(send, 413, "too_large", self._reason(), "body")
                    return {"type": "http.disconnect"}
            return message

        async def guarded(message: Message) -> None:
            if not refused:
                await send(message)

        await self.app(scope, counting, guarded)

    def _reason(self) -> str:
        return f"the request body is larger than {self.limit} bytes"


def host_name(host_header: str) -> str:
    """The host part of a Host header: `[::1]:8080` -> `::1`, `a:80` -> `a`."""
    value = host_header.strip().lower()
    if value.startswith("["):
        return value[1:].partition("]")[0]
    return value.rpartition(":")[0] if value.count(":") == 1 else value


class LoopbackHostOnly:
    """Answers only requests whose Host is a loopback name (see the module doc)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host = _header(scope, b"host")
            if host is None or host_name(host) not in LOOPBACK_HOSTS:
                shown = "no Host header" if host is None else f"Host {host!r}"
                await send_error(
                    send, 421, "misdirected_request",
                    f"{shown} is not a loopback name; a server without credentials answers "
                    "only localhost, 127.0.0.1 and [::1]", "Host")
                return
        await self.app(scope, receive, send)


@dataclass
class StreamSlots:
    """Counts open event streams per Run and per principal."""

    limits: HttpLimits
    per_run: Counter[UUID] = field(default_factory=Counter)
    per_principal: Counter[str] = field(default_factory=Counter)

    def acquire(self, run_id: UUID, principal: str) -> Callable[[], None] | str:
        """A release callback, or the reason the stream is refused."""
        if self.per_run[run_id] >= self.limits.streams_per_run:
            return f"{self.limits.streams_per_run} event streams are already open on this Run"
        if self.per_principal[principal] >= self.limits.streams_per_principal:
            return (f"principal {principal!r} already holds "
                    f"{self.limits.streams_per_principal} open event streams")
        self.per_run[run_id] += 1
        self.per_principal[principal] += 1
        released = False

        def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            self.per_run[run_id] -= 1
            self.per_principal[principal] -= 1
            if self.per_run[run_id] <= 0:
                del self.per_run[run_id]
            if self.per_principal[principal] <= 0:
                del self.per_principal[principal]

        return release
