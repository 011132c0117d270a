"""The soak's Vessels: one slot per Vessel, each holding its current boot.

A killed slot is given a new boot on the same port (a new process, a new
boot id); clients see connection errors meanwhile and retry elsewhere.
`VesselProcess` is the restart receipts' process wrapper, reused as is.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from harness.receipts.process import ReceiptError, VesselProcess

BOOT_ATTEMPTS = 5


@dataclass
class Slot:
    index: int
    boot: VesselProcess
    boots: list[VesselProcess] = field(default_factory=list)
    ready: bool = False


class Fleet:
    def __init__(self, dsn: str, workdir: Path, vessels: int) -> None:
        self.dsn, self.workdir = dsn, workdir
        self._lock = threading.Lock()
        self.slots = [Slot(i, self._process(i, 1, migrate=i == 0)) for i in range(vessels)]
        self.refused: list[str] = []
        """One line per boot that exited before it was ready (startup refused or crashed)."""

    def _process(self, slot: int, n: int, *, migrate: bool = False,
                 port: int | None = None) -> VesselProcess:
        name = f"vessel{slot + 1}-boot{n}"
        if port is None:
            return VesselProcess(self.dsn, self.workdir, name, migrate=migrate)
        return VesselProcess(self.dsn, self.workdir, name, migrate=migrate, port=port)

    def start(self, client: httpx.Client) -> None:
        """Boot every slot, one after another (the first migrates the schema)."""
        for slot in self.slots:
            self._boot(slot, client, slot.boot)

    def _boot(self, slot: Slot, client: httpx.Client, first: VesselProcess) -> None:
        boot = first
        for attempt in range(BOOT_ATTEMPTS):
            slot.boots.append(boot.start())
            with self._lock:
                slot.boot = boot
            try:
                boot.wait_ready(client)
            except ReceiptError as exc:
                self.refused.append(f"{boot.name}: {exc}: {_last_line(boot.output())}")
                boot.kill()
                if attempt + 1 == BOOT_ATTEMPTS:
                    raise
                boot = self._process(slot.index, len(slot.boots) + 1, port=boot.port)
                continue
            with self._lock:
                slot.ready = True
            return

    def urls(self) -> list[str]:
        """The base URLs of the boots believed ready now."""
        with self._lock:
            return [s.boot.url for s in self.slots if s.ready]

    def any_url(self, rng: random.Random) -> str | None:
        urls = self.urls()
        return rng.choice(urls) if urls else None

    def kill_and_replace(self, index: int, client: httpx.Client) -> VesselProcess:
        """SIGKILL slot `index`'s boot, then boot its replacement on the same port."""
        slot = self.slots[index]
        with self._lock:
            slot.ready = False
            old = slot.boot
        old.kill()
        replacement = self._process(index, len(slot.boots) + 1, port=old.port)
        self._boot(slot, client, replacement)
        return slot.boot

    def wait_all_ready(self, client: httpx.Client, within_s: float) -> None:
        """Every slot's boot answers /health ready (after a PostgreSQL restart, say)."""
        deadline = time.monotonic() + within_s
        for slot in self.slots:
            slot.boot.wait_ready(client)
            if time.monotonic() > deadline:
                raise ReceiptError("the fleet was not ready in time")

    def stop(self) -> None:
        for slot in self.slots:
            slot.boot.stop()
            for boot in slot.boots:
                boot.kill()

    def describe(self) -> list[dict[str, object]]:
        return [b.describe() for s in self.slots for b in s.boots]


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "<no output>"
