"""Network faults between the Vessel and PostgreSQL, through Toxiproxy (DESIGN section 7).

`toxiproxy_endpoint()` finds a Toxiproxy API, in this order:

1. `TOXIPROXY_URL` (for example `http://127.0.0.1:8474`): a server someone
   else runs; it must answer `GET /version`, or `ToxiproxyUnavailable`;
2. a `toxiproxy-server` binary on PATH: started on a free loopback port for
   the duration of the block;
3. otherwise the harness's bundled server (`harness.toxiproxy_server`) on
   its own thread.

`netfaults()` wraps that endpoint in the toxiproxy-python client and yields a
`NetFaults`: the client, the endpoint, and helpers to put a proxy in front of
a PostgreSQL DSN and to add or remove toxics. toxiproxy-python keeps its
host and port in class attributes (process-global) and sends its requests
without a timeout, so while the block runs this module points those class
attributes at the endpoint, gives every request a timeout, allows only one
such block per process at a time, and restores everything afterwards. On
exit the proxies created in the block are deleted (never anyone else's: a
shared server under `TOXIPROXY_URL` keeps its own).

The same tests run against any of the three endpoints.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from harness.pg_cluster import free_port
from harness.toxiproxy_server import BundledToxiproxy

URL_ENV = "TOXIPROXY_URL"
BINARY = "toxiproxy-server"
REQUEST_TIMEOUT_S = 10.0
START_TIMEOUT_S = 10.0


class ToxiproxyUnavailable(Exception):
    """The Toxiproxy API named or started could not be reached."""


@dataclass(frozen=True)
class ToxiproxyEndpoint:
    host: str
    port: int
    kind: str
    """`url` (TOXIPROXY_URL), `binary` (a started toxiproxy-server) or `bundled`."""

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


def api_version(url: str, timeout_s: float = 2.0) -> str:
    """`GET /version` of the API at `url`; ToxiproxyUnavailable when it does not answer."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/version", timeout=timeout_s) as reply:
            raw = bytes(reply.read()).decode()
    except (OSError, urllib.error.URLError) as exc:
        raise ToxiproxyUnavailable(f"no Toxiproxy API answers at {url}: {exc}") from exc
    try:
        return str(json.loads(raw)["version"])
    except (ValueError, KeyError, TypeError):
        return raw.strip()  # Toxiproxy before 2.6 answered with the bare version text


@contextlib.contextmanager
def toxiproxy_endpoint(*, bundled_only: bool = False) -> Iterator[ToxiproxyEndpoint]:
    """A reachable Toxiproxy API for the block (see the module docstring for the order)."""
    url = os.environ.get(URL_ENV)
    if url and not bundled_only:
        parts = urlsplit(url if "://" in url else f"http://{url}")
        if not parts.hostname:
            raise ToxiproxyUnavailable(f"{URL_ENV}={url!r} names no host")
        endpoint = ToxiproxyEndpoint(parts.hostname, parts.port or 8474, "url")
        api_version(endpoint.url)
        yield endpoint
        return
    binary = None if bundled_only else shutil.which(BINARY)
    if binary:
        with _started_binary(binary) as endpoint:
            yield endpoint
        return
    with BundledToxiproxy() as server:
        yield ToxiproxyEndpoint(server.host, server.port, "bundled")


@contextlib.contextmanager
def _started_binary(binary: str) -> Iterator[ToxiproxyEndpoint]:
    port = free_port()
    process = subprocess.Popen(
        [binary, "-host", "127.0.0.1", "-port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        endpoint = ToxiproxyEndpoint("127.0.0.1", port, "binary")
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                api_version(endpoint.url, timeout_s=0.5)
                break
            except ToxiproxyUnavailable:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise ToxiproxyUnavailable(
                        f"{binary} did not answer on {endpoint.url} within "
                        f"{START_TIMEOUT_S:g} s (exit code {process.poll()})"
                    ) from None
                time.sleep(0.05)
        yield endpoint
    finally:
        process.terminate()
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


# -- the toxiproxy-python client ---------------------------------------------------------

_CLIENT_LOCK = threading.Lock()


def _requests_with_timeout(timeout_s: float) -> Any:
    """A stand-in for the `requests` module as toxiproxy.api uses it, with a timeout."""
    import requests

    def call(method: str) -> Any:
        def send(url: str, **kwargs: Any) -> Any:
            kwargs.setdefault("timeout", timeout_s)
            return requests.request(method, url, **kwargs)

        return send

    return SimpleNamespace(get=call("GET"), post=call("POST"), delete=call("DELETE"))


@contextlib.contextmanager
def _pointed_at(endpoint: ToxiproxyEndpoint, timeout_s: float) -> Iterator[None]:
    from toxiproxy import api

    if not _CLIENT_LOCK.acquire(timeout=30):
        raise RuntimeError("another netfaults() block holds toxiproxy-python's global settings")
    saved = (api.APIConsumer.host, api.APIConsumer.port, api.requests)
    try:
        api.APIConsumer.host, api.APIConsumer.port = endpoint.host, endpoint.port
        api.requests = _requests_with_timeout(timeout_s)
        yield
    finally:
        api.APIConsumer.host, api.APIConsumer.port, api.requests = saved
        _CLIENT_LOCK.release()


def proxied_dsn(dsn: str, listen: str) -> str:
    """`dsn` with its host and port replaced by a proxy's `host:port` listen address."""
    host, _, port = listen.rpartition(":")
    params = conninfo_to_dict(dsn)
    params.pop("hostaddr", None)
    return make_conninfo("", **{**params, "host": host.strip("[]"), "port": port})


def upstream_of(dsn: str) -> str:
    """`host:port` of a DSN's server (defaults: 127.0.0.1 and 5432)."""
    params = conninfo_to_dict(dsn)
    host = str(params.get("hostaddr") or params.get("host") or "127.0.0.1")
    if host.startswith("/"):
        raise ValueError(f"DSN {dsn!r} uses a Unix socket; a TCP proxy needs host and port")
    return f"{host}:{params.get('port') or 5432}"


@dataclass
class NetFaults:
    """The client, its endpoint, and the proxies this block created."""

    client: Any
    """A `toxiproxy.Toxiproxy`."""
    endpoint: ToxiproxyEndpoint
    owned: dict[str, Any] = field(default_factory=dict)

    def proxy(self, name: str, upstream: str, listen: str = "127.0.0.1:0") -> Any:
        """Create a proxy (a `toxiproxy.Proxy`) that this block deletes on exit."""
        proxy = self.client.create(upstream=upstream, name=name, listen=listen)
        self.owned[name] = proxy
        return proxy

    def proxy_dsn(self, name: str, dsn: str) -> tuple[Any, str]:
        """A proxy in front of `dsn`'s server and the DSN that connects through it."""
        proxy = self.proxy(name, upstream_of(dsn))
        return proxy, proxied_dsn(dsn, proxy.listen)

    def add(
        self,
        proxy: Any,
        kind: str,
        *,
        stream: str = "downstream",
        toxicity: float = 1.0,
        name: str | None = None,
        **attributes: int,
    ) -> str:
        """Add a toxic; return its name."""
        toxic = name or f"{kind}_{stream}"
        proxy.add_toxic(
            type=kind, stream=stream, toxicity=toxicity, name=toxic, attributes=attributes
        )
        return toxic

    def remove(self, proxy: Any, toxic: str) -> None:
        """Remove a toxic; one that is already gone is fine."""
        from toxiproxy.exceptions import NotFound

        with contextlib.suppress(NotFound):
            proxy.destroy_toxic(toxic)

    @contextlib.contextmanager
    def toxic(
        self,
        proxy: Any,
        kind: str,
        *,
        stream: str = "downstream",
        toxicity: float = 1.0,
        name: str | None = None,
        **attributes: int,
    ) -> Iterator[str]:
        """The toxic for the duration of the block."""
        toxic = self.add(proxy, kind, stream=stream, toxicity=toxicity, name=name, **attributes)
        try:
            yield toxic
        finally:
            self.remove(proxy, toxic)

    def heal(self) -> None:
        """Every owned proxy enabled and free of toxics (others' proxies untouched)."""
        for proxy in self.owned.values():
            for toxic in list(proxy.toxics()):
                self.remove(proxy, toxic)
            proxy.enable()

    def close(self) -> None:
        from toxiproxy.exceptions import NotFound

        for name, proxy in list(self.owned.items()):
            with contextlib.suppress(NotFound):
                proxy.destroy()
            del self.owned[name]


@contextlib.contextmanager
def netfaults(
    endpoint: ToxiproxyEndpoint | None = None,
    *,
    bundled_only: bool = False,
    request_timeout_s: float = REQUEST_TIMEOUT_S,
) -> Iterator[NetFaults]:
    """toxiproxy-python pointed at a Toxiproxy API for the block; everything torn down after."""
    from toxiproxy import Toxiproxy

    with contextlib.ExitStack() as stack:
        if endpoint is None:
            endpoint = stack.enter_context(toxiproxy_endpoint(bundled_only=bundled_only))
        stack.enter_context(_pointed_at(endpoint, request_timeout_s))
        faults = NetFaults(Toxiproxy(), endpoint)
        stack.callback(faults.close)
        yield faults
