"""One real `vessel serve` process on loopback, driven by the receipt lifecycle."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

TOKEN = "receipt-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
READY_WITHIN_S = 60.0


class ReceiptError(Exception):
    """The lifecycle could not proceed; the receipt records why."""


PORTS_ENV = "HARNESS_VESSEL_PORTS"
"""`A-B`: the loopback ports spawned Vessels may bind (`harness receipts --ports`)."""
_next_in_range: dict[tuple[int, int], int] = {}


def port_range(spec: str) -> tuple[int, int]:
    """`20000-20099` -> (20000, 20099); ValueError says what is wrong."""
    lo, dash, hi = spec.partition("-")
    try:
        a, b = int(lo), int(hi)
    except ValueError:
        raise ValueError(f"port range {spec!r} is not A-B (two port numbers)") from None
    if not dash or not 1024 <= a <= b <= 65535:
        raise ValueError(f"port range {spec!r} must be A-B with 1024 <= A <= B <= 65535")
    return a, b


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A free loopback port: any, or the next free one of $HARNESS_VESSEL_PORTS.

    Within a range, ports are handed out in turn (never the same one twice in
    a row), so two Vessels created before either binds do not collide.
    """
    spec = os.environ.get(PORTS_ENV)
    if not spec:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])
    lo, hi = port_range(spec)
    start = _next_in_range.get((lo, hi), lo)
    size = hi - lo + 1
    for i in range(size):
        port = lo + (start - lo + i) % size
        if _bindable(port):
            _next_in_range[(lo, hi)] = lo + (port - lo + 1) % size
            return port
    raise ReceiptError(f"no free port in {PORTS_ENV}={spec}")


@dataclass
class VesselProcess:
    dsn: str
    workdir: Path
    name: str
    crash_at: str | None = None
    migrate: bool = False
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    ended_at: float | None = None
    boot_id: str | None = None
    args: tuple[str, ...] = ()
    """Further `vessel serve` options (e.g. `--agents leased --workspace W`)."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.workdir / f"{self.name}.log"

    def start(self) -> VesselProcess:
        env = {k: v for k, v in os.environ.items()
               if k not in ("VESSEL_CRASH_AT", "VESSEL_TOKENS", "VESSEL_TOKEN")}
        env["VESSEL_TOKEN"] = TOKEN
        if self.crash_at is not None:
            env["VESSEL_CRASH_AT"] = self.crash_at
        argv = [sys.executable, "-m", "runtime.app.cli", "serve", "--dsn", self.dsn,
                "--host", "127.0.0.1", "--port", str(self.port), "--log-level", "info"]
        if self.migrate:
            argv.append("--migrate")
        argv.extend(self.args)
        self.started_at = time.time()
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def wait_ready(self, client: httpx.Client) -> dict[str, Any]:
        """Until /health reports ready; ReceiptError if the process exits or stalls."""
        assert self.proc is not None
        deadline = time.monotonic() + READY_WITHIN_S
        last = "no answer"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.ended_at = time.time()
                raise ReceiptError(f"{self.name} exited {self.proc.returncode} before ready")
            try:
                response = client.get(f"{self.url}/health", timeout=2)
                body: dict[str, Any] = response.json()
                if response.status_code == 200 and body.get("ready"):
                    self.boot_id = body.get("boot_id")
                    return body
                last = response.text[:200]
            except (httpx.TransportError, ValueError) as exc:
                last = repr(exc)
            time.sleep(0.1)
        raise ReceiptError(f"{self.name} not ready within {READY_WITHIN_S:g}s ({last})")

    def wait_death(self, within: float = 30.0) -> int:
        assert self.proc is not None
        try:
            code = self.proc.wait(timeout=within)
        except subprocess.TimeoutExpired:
            raise ReceiptError(f"{self.name} still alive {within:g}s after the window") from None
        self.ended_at = time.time()
        return code

    def stop(self) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return self.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=45)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self.ended_at = time.time()
        return code

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def describe(self) -> dict[str, Any]:
        code = self.returncode
        return {
            "name": self.name,
            "pid": self.pid if self.proc else None,
            "boot_id": self.boot_id,
            "crash_plan": self.crash_at,
            "exit_code": code,
            "exit_signal": signal.Signals(-code).name if code is not None and code < 0 else None,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
        }
