"""A Toxiproxy-compatible TCP fault proxy on the standard library's asyncio (DESIGN section 7).

No registry ships a Toxiproxy binary, so the harness carries this stand-in for
the subset of Toxiproxy 2.x that the network-fault tests use. It speaks the
same HTTP API, closely enough that toxiproxy-python 0.1.1 drives it unchanged:

- `GET /proxies`, `POST /proxies` (201), `POST /populate`;
- `GET`, `POST`/`PATCH` (update: `enabled`, `listen`, `upstream`), `DELETE` (204)
  on `/proxies/{name}`;
- `GET`, `POST` on `/proxies/{name}/toxics` (create answers 200, like Toxiproxy);
- `GET`, `POST`/`PATCH`, `DELETE` on `/proxies/{name}/toxics/{toxic}`;
- `POST /reset` (every proxy enabled, every toxic removed; 204), `GET /version`;
- errors as `{"error": "...", "status": N}` with that HTTP status.

Toxics, each with `stream` (`upstream`: client to server, `downstream`:
server to client; default downstream) and `toxicity` (the chance, rolled
once per connection, that the toxic applies to it):

- `latency` {latency, jitter} ms: every chunk is delayed, order kept;
- `bandwidth` {rate} KB/s (1 KB = 1000 bytes; 0 means unlimited);
- `timeout` {timeout} ms: no data passes; the connection is closed after the
  timeout, or never when it is 0 (a black hole). Removing the toxic closes
  the connections it held, as Toxiproxy's cleanup does;
- `reset_peer` {timeout} ms: the first chunk that arrives is dropped and,
  `timeout` ms later, both sockets are closed with SO_LINGER 0 (an RST);
- `limit_data` {bytes}: that many bytes pass, then the connection is closed.

Toxics affect open connections as soon as the API call returns. The server
runs in a background thread with its own event loop (`BundledToxiproxy`), so
blocking clients on the caller's loop cannot stall it, or as a process:
`python -m harness.toxiproxy_server --port 8474` (port 0 picks a free port;
the first line printed names the API URL). By default it refuses to listen
on, or forward to, anything but a loopback address.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import itertools
import json
import logging
import random
import signal
import socket
import struct
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from http import HTTPStatus
from types import TracebackType
from typing import Any
from urllib.parse import unquote

log = logging.getLogger(__name__)

VERSION = "2.12.0-harness"
"""The Toxiproxy API version this server imitates, marked as the harness's own."""

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8474
STREAMS = ("upstream", "downstream")
TOXIC_ATTRIBUTES: dict[str, dict[str, int]] = {
    "latency": {"latency": 0, "jitter": 0},
    "bandwidth": {"rate": 0},
    "timeout": {"timeout": 0},
    "reset_peer": {"timeout": 0},
    "limit_data": {"bytes": 0},
}
READ_SIZE = 64 * 1024
QUEUE_CHUNKS = 64
UPSTREAM_CONNECT_TIMEOUT_S = 5.0
HTTP_IDLE_TIMEOUT_S = 60.0
HTTP_MAX_BODY = 1 << 20
_LINGER_ZERO = struct.pack("ii", 1, 0)


class ApiError(Exception):
    """An API failure with its HTTP status; the body is Toxiproxy's error JSON."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.message = message
        self.status = status

    def body(self) -> dict[str, Any]:
        return {"error": self.message, "status": self.status}


def _bad_body(detail: str) -> ApiError:
    return ApiError(f"bad request body: {detail}", HTTPStatus.BAD_REQUEST)


def split_address(address: str) -> tuple[str, int]:
    """`host:port` (or `[v6]:port`) into its parts; ApiError 400 when malformed."""
    host, sep, port_text = address.rpartition(":")
    if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise _bad_body(f"{address!r} is not host:port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port_text)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# -- toxics -----------------------------------------------------------------------------


_TOXIC_UIDS = itertools.count(1)


@dataclass(eq=False)
class Toxic:
    """One configured toxic."""

    name: str
    type: str
    stream: str
    toxicity: float
    attributes: dict[str, int]
    generation: int = 0
    """Bumped on every update, so each connection rolls its toxicity again."""
    uid: int = field(default_factory=lambda: next(_TOXIC_UIDS))
    """Keys per-connection state; unlike id(), never reused by a later toxic."""

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "stream": self.stream,
            "toxicity": self.toxicity,
            "attributes": dict(self.attributes),
        }

    def attr(self, key: str) -> int:
        return self.attributes.get(key, 0)


def _number(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _bad_body(f"{what} must be a number, got {value!r}")
    return float(value)


def parse_attributes(kind: str, given: object, base: dict[str, int]) -> dict[str, int]:
    """Known attributes of `kind` over `base`; unknown keys are ignored, as Go's decoder does."""
    if given is None:
        return dict(base)
    if not isinstance(given, dict):
        raise _bad_body("attributes must be an object")
    result = dict(base)
    for key in TOXIC_ATTRIBUTES[kind]:
        if key in given:
            number = _number(given[key], f"attribute {key}")
            if number < 0 or number != int(number):
                raise _bad_body(f"attribute {key} must be a non-negative integer")
            result[key] = int(number)
    return result


def parse_toxicity(value: object) -> float:
    number = _number(value, "toxicity")
    if not 0.0 <= number <= 1.0:
        raise _bad_body("toxicity must be between 0 and 1")
    return number


def new_toxic(body: dict[str, Any]) -> Toxic:
    kind = body.get("type")
    stream = body.get("stream", "downstream")
    if stream not in STREAMS:
        raise ApiError(
            "stream was invalid, can be either upstream or downstream", HTTPStatus.BAD_REQUEST
        )
    if not isinstance(kind, str) or kind not in TOXIC_ATTRIBUTES:
        raise ApiError("invalid toxic type", HTTPStatus.BAD_REQUEST)
    name = body.get("name") or f"{kind}_{stream}"
    if not isinstance(name, str):
        raise _bad_body("name must be a string")
    return Toxic(
        name=name,
        type=kind,
        stream=stream,
        toxicity=parse_toxicity(body.get("toxicity", 1.0)),
        attributes=parse_attributes(kind, body.get("attributes"), TOXIC_ATTRIBUTES[kind]),
    )


# -- connections ------------------------------------------------------------------------


@dataclass
class _Chunk:
    data: bytes
    due: float
    rate: int | None


_CLOSE = object()
"""Queued after the last chunk a pipe may deliver: flush, then close the connection."""


class _Pipe:
    """One direction of a connection: read, pass through the toxic chain, write."""

    def __init__(
        self, link: _Link, stream: str, source: asyncio.StreamReader, sink: asyncio.StreamWriter
    ) -> None:
        self.link = link
        self.stream = stream
        self.source = source
        self.sink = sink
        self.queue: asyncio.Queue[_Chunk | object] = asyncio.Queue(QUEUE_CHUNKS)
        self.limited: dict[int, int] = {}
        """Bytes passed per limit_data toxic (keyed by its uid)."""
        self.resetting: int | None = None
        """The uid of the reset_peer toxic whose reset is pending: everything is dropped."""

    async def pump(self) -> None:
        try:
            while True:
                data = await self.source.read(READ_SIZE)
                if not data:
                    break
                if not await self._process(data):
                    return
        except (ConnectionError, OSError):
            pass
        if self.resetting is not None:
            return  # the pending reset ends the connection, with an RST, not a FIN
        await self.queue.put(_CLOSE)

    async def _process(self, data: bytes) -> bool:
        """Apply the chain to one chunk; False when this pipe must stop reading."""
        loop = asyncio.get_running_loop()
        due = loop.time()
        rate: int | None = None
        close_after = False
        for toxic in self.link.proxy.chain(self.stream):
            if not self.link.applies(toxic):
                continue
            if toxic.type == "timeout":
                return True  # dropped; the link's timer (if any) closes it
            if toxic.type == "reset_peer":
                if self.resetting is None:
                    self.resetting = toxic.uid
                    self.link.schedule_close(toxic, toxic.attr("timeout") / 1000, reset=True)
                return True  # dropped, like everything after it
            if toxic.type == "latency":
                jitter = toxic.attr("jitter")
                delay_ms = toxic.attr("latency") + random.randint(-jitter, jitter)
                due += max(0, delay_ms) / 1000
            elif toxic.type == "bandwidth":
                limit = toxic.attr("rate")
                if limit > 0:
                    rate = limit if rate is None else min(rate, limit)
            elif toxic.type == "limit_data":
                passed = self.limited.get(toxic.uid, 0)
                data = data[: max(0, toxic.attr("bytes") - passed)]
                self.limited[toxic.uid] = passed + len(data)
                if passed + len(data) >= toxic.attr("bytes"):
                    close_after = True
        if self.resetting is not None:
            return True
        if data:
            await self.queue.put(_Chunk(data, due, rate))
        if close_after:
            await self.queue.put(_CLOSE)
            return False
        return True

    async def deliver(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                item = await self.queue.get()
                if not isinstance(item, _Chunk):
                    break
                wait = item.due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                await self._write(item)
        except (ConnectionError, OSError):
            pass
        self.link.close()

    async def _write(self, chunk: _Chunk) -> None:
        if chunk.rate is None:
            self.sink.write(chunk.data)
            await self.sink.drain()
            return
        step = max(1, chunk.rate * 100)  # what `rate` KB/s moves in 100 ms
        for start in range(0, len(chunk.data), step):
            piece = chunk.data[start : start + step]
            await asyncio.sleep(len(piece) / (chunk.rate * 1000))
            self.sink.write(piece)
            await self.sink.drain()


class _Link:
    """One proxied connection: the client's socket, the upstream socket, two pipes."""

    def __init__(
        self,
        proxy: _Proxy,
        client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    ) -> None:
        self.proxy = proxy
        self.writers = (client[1], upstream[1])
        self.pipes = (
            _Pipe(self, "upstream", client[0], upstream[1]),
            _Pipe(self, "downstream", upstream[0], client[1]),
        )
        self.rolls: dict[tuple[int, int], bool] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.timers: dict[int, asyncio.TimerHandle] = {}
        self.closed = False

    def start(self) -> None:
        for toxic in self.proxy.toxics.values():
            self.toxic_added(toxic)
        for pipe in self.pipes:
            self._spawn(pipe.pump())
            self._spawn(pipe.deliver())

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def applies(self, toxic: Toxic) -> bool:
        """Roll the toxic's toxicity once per connection (and again after an update)."""
        key = (toxic.uid, toxic.generation)
        if key not in self.rolls:
            self.rolls[key] = random.random() < toxic.toxicity
        return self.rolls[key]

    def toxic_added(self, toxic: Toxic) -> None:
        if toxic.type == "timeout" and toxic.attr("timeout") > 0 and self.applies(toxic):
            self.schedule_close(toxic, toxic.attr("timeout") / 1000, reset=False)

    def toxic_removed(self, toxic: Toxic) -> None:
        self._cancel_timer(toxic)
        for pipe in self.pipes:
            if pipe.resetting == toxic.uid:
                pipe.resetting = None
        if toxic.type == "timeout":
            self.close()  # Toxiproxy's cleanup closes what the timeout toxic held

    def toxic_updated(self, toxic: Toxic) -> None:
        self._cancel_timer(toxic)
        self.toxic_added(toxic)

    def schedule_close(self, toxic: Toxic, delay_s: float, *, reset: bool) -> None:
        """Close (or reset) this connection `delay_s` from now unless `toxic` goes first."""
        self._cancel_timer(toxic)
        self.timers[toxic.uid] = asyncio.get_running_loop().call_later(
            delay_s, lambda: self.close(reset=reset)
        )

    def _cancel_timer(self, toxic: Toxic) -> None:
        timer = self.timers.pop(toxic.uid, None)
        if timer is not None:
            timer.cancel()

    def close(self, *, reset: bool = False) -> None:
        """Close both sockets now; with `reset`, abortively (RST via SO_LINGER 0)."""
        if self.closed:
            return
        self.closed = True
        for timer in self.timers.values():
            timer.cancel()
        self.timers.clear()
        for writer in self.writers:
            if reset:
                sock = writer.get_extra_info("socket")
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_ZERO)
                writer.transport.abort()
            else:
                writer.close()
        current = asyncio.current_task()
        for task in list(self.tasks):
            if task is not current:
                task.cancel()
        self.proxy.links.discard(self)


class _Proxy:
    def __init__(self, name: str, listen: str, upstream: str) -> None:
        self.name = name
        self.listen = listen
        self.upstream = upstream
        self.enabled = False
        self.toxics: dict[str, Toxic] = {}
        self.links: set[_Link] = set()
        self._listener: asyncio.Server | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "listen": self.listen,
            "upstream": self.upstream,
            "enabled": self.enabled,
            "toxics": [t.as_json() for t in self.toxic_list()],
        }

    def toxic_list(self) -> list[Toxic]:
        """Upstream toxics, then downstream ones, each in the order added (Toxiproxy's)."""
        return [t for s in STREAMS for t in self.toxics.values() if t.stream == s]

    def chain(self, stream: str) -> list[Toxic]:
        return [t for t in self.toxics.values() if t.stream == stream]

    async def start(self) -> None:
        if self._listener is not None:
            return
        host, port = split_address(self.listen)
        try:
            self._listener = await asyncio.start_server(self._accept, host, port)
        except OSError as exc:
            raise ApiError(f"listen on {self.listen} failed: {exc}", 500) from exc
        bound = self._listener.sockets[0].getsockname()
        shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
        self.listen = f"{shown}:{bound[1]}"
        self.enabled = True

    async def stop(self) -> None:
        listener, self._listener = self._listener, None
        self.enabled = False
        if listener is not None:
            listener.close()
        for link in list(self.links):
            link.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        host, port = split_address(self.upstream)
        try:
            upstream = await asyncio.wait_for(
                asyncio.open_connection(host, port), UPSTREAM_CONNECT_TIMEOUT_S
            )
        except asyncio.CancelledError:  # shutdown; see _serve_http
            writer.close()
            return
        except (OSError, TimeoutError) as exc:
            log.info("proxy %s: upstream %s unreachable: %r", self.name, self.upstream, exc)
            writer.close()
            return
        if not self.enabled:
            writer.close()
            upstream[1].close()
            return
        link = _Link(self, (reader, writer), upstream)
        self.links.add(link)
        link.start()

    def add_toxic(self, toxic: Toxic) -> None:
        if toxic.name in self.toxics:
            raise ApiError("toxic already exists", HTTPStatus.CONFLICT)
        self.toxics[toxic.name] = toxic
        for link in list(self.links):
            link.toxic_added(toxic)

    def update_toxic(self, name: str, body: dict[str, Any]) -> Toxic:
        toxic = self._toxic(name)
        attributes = parse_attributes(toxic.type, body.get("attributes"), toxic.attributes)
        toxicity = parse_toxicity(body.get("toxicity", toxic.toxicity))
        toxic.attributes, toxic.toxicity = attributes, toxicity
        toxic.generation += 1
        for link in list(self.links):
            link.toxic_updated(toxic)
        return toxic

    def remove_toxic(self, name: str) -> None:
        toxic = self._toxic(name)
        del self.toxics[name]
        for link in list(self.links):
            link.toxic_removed(toxic)

    def _toxic(self, name: str) -> Toxic:
        toxic = self.toxics.get(name)
        if toxic is None:
            raise ApiError("toxic not found", HTTPStatus.NOT_FOUND)
        return toxic


# -- the API ----------------------------------------------------------------------------

Handler = Callable[[dict[str, str], Any], Awaitable[tuple[int, Any]]]


class ToxiproxyServer:
    """The proxies and the HTTP API, on the running event loop."""

    def __init__(self, *, loopback_only: bool = True) -> None:
        self.loopback_only = loopback_only
        self.proxies: dict[str, _Proxy] = {}
        self._api: asyncio.Server | None = None
        self._lock = asyncio.Lock()

    async def start(self, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> int:
        """Serve the API on host:port (0: a free port); return the bound port."""
        self._check_host(host, "API address")
        self._api = await asyncio.start_server(self._serve_http, host, port)
        return int(self._api.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self._api is not None:
            self._api.close()
            self._api = None
        for proxy in list(self.proxies.values()):
            await proxy.stop()
        self.proxies.clear()

    def _check_host(self, host: str, what: str) -> None:
        if self.loopback_only and not is_loopback(host):
            raise ApiError(
                f"{what} {host!r} is not a loopback address (this server is loopback-only)",
                HTTPStatus.BAD_REQUEST,
            )

    # -- operations -----------------------------------------------------------------

    async def create_proxy(self, body: Any) -> _Proxy:
        if not isinstance(body, dict):
            raise _bad_body("expected a JSON object")
        name, upstream = body.get("name"), body.get("upstream")
        if not isinstance(name, str) or not name:
            raise ApiError("missing required field: name", HTTPStatus.BAD_REQUEST)
        if not isinstance(upstream, str) or not upstream:
            raise ApiError("missing required field: upstream", HTTPStatus.BAD_REQUEST)
        listen = body.get("listen") or f"{DEFAULT_HOST}:0"
        if not isinstance(listen, str):
            raise _bad_body("listen must be a string")
        enabled = body.get("enabled", True)
        if not isinstance(enabled, bool):
            raise _bad_body("enabled must be a boolean")
        self._check_host(split_address(listen)[0], "listen address")
        self._check_host(split_address(upstream)[0], "upstream")
        if name in self.proxies:
            raise ApiError("proxy already exists", HTTPStatus.CONFLICT)
        proxy = _Proxy(name, listen, upstream)
        if enabled:
            await proxy.start()
        self.proxies[name] = proxy
        return proxy

    def proxy(self, name: str) -> _Proxy:
        proxy = self.proxies.get(name)
        if proxy is None:
            raise ApiError("proxy not found", HTTPStatus.NOT_FOUND)
        return proxy

    async def update_proxy(self, name: str, body: Any) -> _Proxy:
        proxy = self.proxy(name)
        if not isinstance(body, dict):
            raise _bad_body("expected a JSON object")
        listen = body.get("listen", proxy.listen)
        upstream = body.get("upstream", proxy.upstream)
        enabled = body.get("enabled", proxy.enabled)
        if not isinstance(listen, str) or not isinstance(upstream, str):
            raise _bad_body("listen and upstream must be strings")
        if not isinstance(enabled, bool):
            raise _bad_body("enabled must be a boolean")
        self._check_host(split_address(listen)[0], "listen address")
        self._check_host(split_address(upstream)[0], "upstream")
        if listen != proxy.listen or upstream != proxy.upstream:
            await proxy.stop()  # Toxiproxy restarts a proxy whose addresses change
            proxy.listen, proxy.upstream = listen, upstream
        if enabled:
            await proxy.start()
        else:
            await proxy.stop()
        return proxy

    async def delete_proxy(self, name: str) -> None:
        proxy = self.proxy(name)
        await proxy.stop()
        del self.proxies[name]

    async def reset(self) -> None:
        for proxy in self.proxies.values():
            await proxy.start()
            for name in list(proxy.toxics):
                proxy.remove_toxic(name)

    async def populate(self, body: Any) -> list[_Proxy]:
        if not isinstance(body, list):
            raise _bad_body("expected a JSON array of proxies")
        result = []
        for entry in body:
            if not isinstance(entry, dict):
                raise _bad_body("expected a JSON object per proxy")
            existing = self.proxies.get(str(entry.get("name")))
            if existing is not None and (
                existing.upstream != entry.get("upstream")
                or existing.listen != entry.get("listen", existing.listen)
            ):
                await self.delete_proxy(existing.name)
                existing = None
            result.append(existing or await self.create_proxy(entry))
        return result

    # -- routing --------------------------------------------------------------------

    async def dispatch(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        parts = [unquote(p) for p in path.split("?", 1)[0].split("/") if p]
        async with self._lock:
            return await self._route(method, parts, body)

    async def _route(self, method: str, parts: list[str], body: Any) -> tuple[int, Any]:
        update = method in ("POST", "PATCH")
        match parts:
            case ["version"] if method == "GET":
                return 200, {"version": VERSION}
            case ["reset"] if method == "POST":
                await self.reset()
                return 204, None
            case ["populate"] if method == "POST":
                made = await self.populate(body)
                return 201, {"proxies": [p.as_json() for p in made]}
            case ["proxies"] if method == "GET":
                return 200, {name: p.as_json() for name, p in self.proxies.items()}
            case ["proxies"] if method == "POST":
                return 201, (await self.create_proxy(body)).as_json()
            case ["proxies", name] if method == "GET":
                return 200, self.proxy(name).as_json()
            case ["proxies", name] if update:
                return 200, (await self.update_proxy(name, body)).as_json()
            case ["proxies", name] if method == "DELETE":
                await self.delete_proxy(name)
                return 204, None
            case ["proxies", name, "toxics"] if method == "GET":
                return 200, [t.as_json() for t in self.proxy(name).toxic_list()]
            case ["proxies", name, "toxics"] if method == "POST":
                proxy = self.proxy(name)
                if not isinstance(body, dict):
                    raise _bad_body("expected a JSON object")
                toxic = new_toxic(body)
                proxy.add_toxic(toxic)
                return 200, toxic.as_json()
            case ["proxies", name, "toxics", toxic] if method == "GET":
                return 200, self.proxy(name)._toxic(toxic).as_json()
            case ["proxies", name, "toxics", toxic] if update:
                if not isinstance(body, dict):
                    raise _bad_body("expected a JSON object")
                return 200, self.proxy(name).update_toxic(toxic, body).as_json()
            case ["proxies", name, "toxics", toxic] if method == "DELETE":
                self.proxy(name).remove_toxic(toxic)
                return 204, None
            case ["version"] | ["reset"] | ["populate"] | ["proxies", *_]:
                if len(parts) <= 4:
                    raise ApiError("method not allowed", HTTPStatus.METHOD_NOT_ALLOWED)
        raise ApiError("not found", HTTPStatus.NOT_FOUND)

    # -- HTTP/1.1 -------------------------------------------------------------------

    async def _serve_http(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await self._one_request(reader, writer):
                pass
        except (ConnectionError, OSError, TimeoutError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            # Server shutdown. asyncio 3.11's start_server callback calls
            # task.exception() on a cancelled handler and logs a traceback.
            pass
        except Exception:  # a bug here must not kill the server
            log.exception("bundled toxiproxy: HTTP handler failed")
        finally:
            writer.close()

    async def _one_request(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        line = await asyncio.wait_for(reader.readline(), HTTP_IDLE_TIMEOUT_S)
        if not line.strip():
            return False
        try:
            method, target, version = line.decode("latin-1").split()
        except ValueError:
            await _respond(writer, 400, ApiError("malformed request line", 400).body(), False)
            return False
        headers: dict[str, str] = {}
        while True:
            raw = await asyncio.wait_for(reader.readline(), HTTP_IDLE_TIMEOUT_S)
            if raw in (b"\r\n", b"\n", b""):
                break
            key, _, value = raw.decode("latin-1").partition(":")
            headers[key.strip().lower()] = value.strip()
        keep = version.upper() == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
        if "chunked" in headers.get("transfer-encoding", "").lower():
            await _respond(writer, 411, ApiError("length required", 411).body(), False)
            return False
        length = int(headers.get("content-length", "0") or 0)
        if length > HTTP_MAX_BODY:
            await _respond(writer, 413, ApiError("request body too large", 413).body(), False)
            return False
        raw_body = await reader.readexactly(length) if length else b""
        try:
            body = json.loads(raw_body) if raw_body.strip() else {}
        except ValueError as exc:
            status, payload = 400, _bad_body(str(exc)).body()
        else:
            try:
                status, payload = await self.dispatch(method.upper(), target, body)
            except ApiError as exc:
                status, payload = exc.status, exc.body()
        await _respond(writer, status, payload, keep)
        return keep


async def _respond(writer: asyncio.StreamWriter, status: int, payload: Any, keep: bool) -> None:
    body = b"" if status == 204 else json.dumps(payload).encode()
    reason = HTTPStatus(status).phrase
    head = [f"HTTP/1.1 {status} {reason}", f"Content-Length: {len(body)}"]
    if status != 204:
        head.append("Content-Type: application/json")
    head.append("Connection: keep-alive" if keep else "Connection: close")
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
    await writer.drain()


# -- running it -------------------------------------------------------------------------


class BundledToxiproxy:
    """The server on its own event loop in a daemon thread; a context manager.

    `start()` returns once the API answers on `url`; `stop()` closes every
    proxy and connection and joins the thread.
    """

    def __init__(
        self, host: str = DEFAULT_HOST, port: int = 0, *, loopback_only: bool = True
    ) -> None:
        self.host = host
        self.port = port
        self.loopback_only = loopback_only
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: ToxiproxyServer | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout_s: float = 10.0) -> BundledToxiproxy:
        if self._thread is not None:
            return self
        ready = threading.Event()
        failure: list[BaseException] = []
        loop = asyncio.new_event_loop()

        async def boot() -> None:
            self._server = ToxiproxyServer(loopback_only=self.loopback_only)
            self.port = await self._server.start(self.host, self.port)

        def main() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(boot())
            except BaseException as exc:
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=main, name="bundled-toxiproxy", daemon=True)
        self._thread.start()
        if not ready.wait(timeout_s):
            raise RuntimeError(f"bundled toxiproxy did not start within {timeout_s:g} s")
        if failure:
            self._thread.join()
            self._thread = None
            raise RuntimeError(f"bundled toxiproxy did not start: {failure[0]!r}") from failure[0]
        return self

    def call(self, fn: Callable[[ToxiproxyServer], Awaitable[Any]], timeout_s: float = 10.0) -> Any:
        """Run `fn(server)` on the server's loop from another thread; return its result."""
        if self._loop is None or self._server is None:
            raise RuntimeError("bundled toxiproxy is not running")
        server = self._server

        async def run() -> Any:
            return await fn(server)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout_s)

    def stop(self, timeout_s: float = 10.0) -> None:
        thread, loop = self._thread, self._loop
        if thread is None or loop is None:
            return
        with contextlib.suppress(Exception):
            self.call(lambda server: server.close(), timeout_s)

        async def finish() -> None:
            current = asyncio.current_task()
            pending = [t for t in asyncio.all_tasks() if t is not current]
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            asyncio.get_running_loop().stop()

        with contextlib.suppress(RuntimeError):
            asyncio.run_coroutine_threadsafe(finish(), loop)
        thread.join(timeout_s)
        self._thread = self._loop = self._server = None

    def __enter__(self) -> BundledToxiproxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


async def serve(host: str, port: int, *, loopback_only: bool = True) -> None:
    """Run the server in this process until SIGINT/SIGTERM."""
    server = ToxiproxyServer(loopback_only=loopback_only)
    bound = await server.start(host, port)
    print(f"toxiproxy (bundled {VERSION}) API on http://{host}:{bound}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await server.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m harness.toxiproxy_server",
        description="The harness's Toxiproxy-compatible fault proxy (loopback only by default).",
    )
    parser.add_argument("--host", default=DEFAULT_HOST)
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="0 picks a free port")
    parser.add_argument(
        "--allow-non-loopback",
        action="store_true",
        help="allow listening on and forwarding to non-loopback addresses",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    try:
        asyncio.run(serve(args.host, args.port, loopback_only=not args.allow_non_loopback))
    except ApiError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
