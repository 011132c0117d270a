"""The soak's faults: Vessel kills, PostgreSQL restarts, and a probe after each.

Kills come every `kill_every_s` seconds while work is in flight (at least
one, even when the work settled sooner), each on a slot the seed chooses;
PostgreSQL restarts come as the admissions pass evenly spaced marks, so
they land inside the traffic however fast it runs. After every fault a
probe `echo` Run is admitted: the time from the fault until the system
acknowledges it (durably admitted, so serving again) is the fault's
recovery time; the time until that probe is DONE (it may queue behind the
backlog the fault left) is reported beside it.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from harness.receipts.process import AUTH, ReceiptError
from harness.soak.fleet import Fleet

RESTART_MODES = ("fast", "immediate")


@dataclass
class Fault:
    kind: str
    """`kill` or `pg_restart`."""
    detail: str
    at_s: float
    recovered_s: float | None = None
    """Fault to the probe's admission: the system serves again."""
    completed_s: float | None = None
    """Fault to the probe's DONE (includes the backlog ahead of it)."""
    probe_run: str | None = None
    note: str = ""
    boot: str | None = None
    """The killed boot's id (kills only)."""


@dataclass
class Chaos:
    fleet: Fleet
    seed: int
    kill_every_s: float
    pg_restart_marks: list[int]
    """Admission counts at which PostgreSQL is restarted, ascending."""
    restart_pg: Callable[[str], None] | None
    admitted: Callable[[], int]
    recover_within_s: float
    started: float = field(default_factory=time.monotonic)
    faults: list[Fault] = field(default_factory=list)
    halt: threading.Event = field(default_factory=threading.Event)
    probes: list[str] = field(default_factory=list)
    """Run ids of the probes: Runs the tally checks like any other."""

    def run(self) -> None:
        rng = random.Random(f"soak-chaos-{self.seed}")
        marks = list(self.pg_restart_marks)
        next_kill = time.monotonic() + self.kill_every_s if self.kill_every_s else None
        with httpx.Client(timeout=10) as client:
            while not self.halt.wait(0.1):
                if marks and self.admitted() >= marks[0]:
                    marks.pop(0)
                    self._pg_restart(client, rng)
                if next_kill is not None and time.monotonic() >= next_kill:
                    self._kill(client, rng)
                    next_kill = time.monotonic() + self.kill_every_s
            for _ in marks:  # the traffic ended before these marks: restart anyway
                self._pg_restart(client, rng)
            if next_kill is not None and not any(f.kind == "kill" for f in self.faults):
                self._kill(client, rng)  # the work settled before the first kill was due

    def _now(self) -> float:
        return round(time.monotonic() - self.started, 3)

    def _kill(self, client: httpx.Client, rng: random.Random) -> None:
        slot = rng.randrange(len(self.fleet.slots))
        victim = self.fleet.slots[slot].boot
        fault = Fault("kill", f"SIGKILL {victim.name}", self._now(), boot=victim.boot_id)
        self.faults.append(fault)
        started = time.monotonic()
        try:
            replacement = self.fleet.kill_and_replace(slot, client)
        except ReceiptError as exc:
            fault.note = f"no replacement booted: {exc}"
            return
        self._probe(client, fault, started, replacement.url)

    def _pg_restart(self, client: httpx.Client, rng: random.Random) -> None:
        assert self.restart_pg is not None
        mode = RESTART_MODES[len([f for f in self.faults if f.kind == "pg_restart"]) % 2]
        fault = Fault("pg_restart", f"pg_ctl restart -m {mode}", self._now())
        self.faults.append(fault)
        started = time.monotonic()
        try:
            self.restart_pg(mode)
        except Exception as exc:  # reported in the fault; the soak goes on
            fault.note = f"restart failed: {exc}"
            return
        self._probe(client, fault, started, None)

    def _probe(self, client: httpx.Client, fault: Fault, started: float,
               url: str | None) -> None:
        """Admit an `echo` Run and follow it to DONE; record both times since the fault."""
        key = f"soak-probe-{self.seed}-{len(self.faults)}"
        rng = random.Random(key)
        until = started + self.recover_within_s
        run_id: str | None = None
        while time.monotonic() < until:
            target = url or self.fleet.any_url(rng)
            if target is None:
                time.sleep(0.1)
                continue
            with contextlib.suppress(httpx.TransportError, ValueError, KeyError):
                if run_id is None:
                    run_id = self._admit(client, target, key)
                    if run_id is not None:
                        self.probes.append(run_id)
                        fault.probe_run = run_id
                        fault.recovered_s = round(time.monotonic() - started, 3)
                        until = time.monotonic() + self.recover_within_s
                elif self._status(client, target, run_id) == "DONE":
                    fault.completed_s = round(time.monotonic() - started, 3)
                    return
            url = None  # after the first answer any live Vessel may serve the probe
            time.sleep(0.1)
        if fault.recovered_s is None:
            fault.note = fault.note or f"no probe admitted within {self.recover_within_s:g}s"
        else:  # admitted but slow: the settle phase decides whether it is stuck
            fault.note = fault.note or f"probe not DONE {self.recover_within_s:g}s after admission"

    @staticmethod
    def _admit(client: httpx.Client, url: str, key: str) -> str | None:
        body = {"pattern": "echo", "prompt": "soak probe", "content": {}}
        response = client.post(f"{url}/runs", json=body,
                               headers={**AUTH, "Idempotency-Key": key})
        return str(response.json()["id"]) if response.status_code in (200, 201) else None

    @staticmethod
    def _status(client: httpx.Client, url: str, run_id: str) -> str | None:
        response = client.get(f"{url}/runs/{run_id}", headers=AUTH)
        return str(response.json()["status"]) if response.status_code == 200 else None


def pg_restart_marks(runs: int, restarts: int) -> list[int]:
    """`restarts` admission counts spread evenly inside (0, runs)."""
    return [max(1, runs * (j + 1) // (restarts + 1)) for j in range(restarts)]
