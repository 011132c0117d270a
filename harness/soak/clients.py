"""The soak's people: clients that admit Runs, an approver, an operator who cancels.

Clients behave as a careful caller of the HTTP surface would: on a lost
connection or a 503 they retry the same request, with the same
idempotency key, against whichever Vessel is up. Every answer they get is
recorded, so the tally can tell a Run the system acknowledged (and must
keep) from one it never admitted.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from dataclasses import dataclass, field

import httpx
import psycopg

from harness.receipts.process import AUTH
from harness.soak.fleet import Fleet
from harness.soak.workload import RunPlan, approves

RETRYABLE = {502, 503, 504}
PAUSE_S = 0.1


@dataclass
class Admission:
    """What the clients learned about one key."""

    plan: RunPlan
    run_id: str | None = None
    replay_id: str | None = None
    rejected: str | None = None
    """A non-retryable answer (a 4xx): the system refused the Run; nothing to keep."""
    retries: int = 0
    cancel_answered: bool = False


@dataclass
class Traffic:
    fleet: Fleet
    seed: int
    deadline_s: float
    admissions: dict[str, Admission] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def admitted(self) -> int:
        with self._lock:
            return sum(a.run_id is not None for a in self.admissions.values())

    def drive(self, plan: RunPlan, worker: int) -> None:
        """Admit one Run (with retries), maybe replay its key, maybe cancel it."""
        rng = random.Random(f"soak-client-{self.seed}-{plan.key}-{worker}")
        admission = Admission(plan)
        with self._lock:
            self.admissions[plan.key] = admission
        with httpx.Client(timeout=10) as client:
            admission.run_id = self._submit(client, rng, plan, admission)
            if admission.run_id is None:
                return
            if plan.replay:
                admission.replay_id = self._submit(client, rng, plan, admission)
            if plan.cancel:
                path = f"/runs/{admission.run_id}/cancel"
                admission.cancel_answered = self._post(client, rng, path, None) is not None

    def _submit(self, client: httpx.Client, rng: random.Random, plan: RunPlan,
                admission: Admission) -> str | None:
        headers = {**AUTH, "Idempotency-Key": plan.key}
        response = self._post(client, rng, "/runs", plan.body(), headers, admission)
        if response is None:
            return None
        if response.status_code in (200, 201):
            return str(response.json()["id"])
        admission.rejected = f"{response.status_code} {response.text[:200]}"
        return None

    def _post(self, client: httpx.Client, rng: random.Random, path: str,
              body: object, headers: dict[str, str] | None = None,
              admission: Admission | None = None) -> httpx.Response | None:
        """POST until an answer that is not a transient failure, or the deadline."""
        until = time.monotonic() + self.deadline_s
        while time.monotonic() < until:
            url = self.fleet.any_url(rng)
            if url is not None:
                with contextlib.suppress(httpx.TransportError):
                    response = client.post(url + path, json=body, headers=headers or AUTH)
                    if response.status_code not in RETRYABLE:
                        return response
            if admission is not None:
                admission.retries += 1
            time.sleep(PAUSE_S)
        return None


class Approver(threading.Thread):
    """Decides every pending consent it finds in the ledger, as a human would."""

    def __init__(self, fleet: Fleet, dsn: str, seed: int) -> None:
        super().__init__(name="soak-approver", daemon=True)
        self.fleet, self.dsn, self.seed = fleet, dsn, seed
        self.halt = threading.Event()
        self.decided: set[str] = set()
        self.rng = random.Random(f"soak-approver-{seed}")

    def run(self) -> None:
        with httpx.Client(timeout=10) as client:
            while not self.halt.wait(0.3):
                for consent_id in self._pending():
                    self._decide(client, consent_id)

    def _pending(self) -> list[str]:
        try:
            with psycopg.connect(self.dsn, connect_timeout=3) as conn:
                rows = conn.execute(
                    "SELECT id::text FROM consent WHERE status = 'PENDING' ORDER BY created_at"
                ).fetchall()
        except psycopg.Error:
            return []  # PostgreSQL is restarting: look again next round
        return [str(r[0]) for r in rows if str(r[0]) not in self.decided]

    def _decide(self, client: httpx.Client, consent_id: str) -> None:
        url = self.fleet.any_url(self.rng)
        if url is None:
            return
        body = {"approve": approves(consent_id, self.seed)}
        with contextlib.suppress(httpx.TransportError):
            response = client.post(f"{url}/consents/{consent_id}/decision", json=body,
                                   headers=AUTH)
            if response.status_code not in RETRYABLE:
                self.decided.add(consent_id)  # decided, or no longer decidable (409)
