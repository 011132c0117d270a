"""The crash windows a receipt can prove, and how to drive a real Vessel through each.

Every window names the catalogued fault point boot 1 dies at, how boot 1 is
driven into it over HTTP, how boot 2 is driven to the Run's end, the final
status the seeds prescribe, and window-specific checks over the ledger.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import psycopg
from psycopg.rows import dict_row

from harness.receipts.process import AUTH, ReceiptError, VesselProcess
from runtime import faults
from runtime.models import LedgerDump

WINDOW_KEY = "receipt-run-1"
TERMINAL = ("DONE", "FAILED", "CANCELLED")
LOST_PREFIX = "lost"


@dataclass
class Drive:
    """What a lifecycle learned while driving: the Run's id, once known."""

    pattern: str
    content: dict[str, Any]
    run_id: str | None = None
    notes: list[str] = field(default_factory=list)
    dsn: str | None = None
    """The receipt's database: checks of rows the ledger dump does not hold read it."""

    def body(self) -> dict[str, Any]:
        return {"pattern": self.pattern, "prompt": "restart receipt", "content": self.content}


def submit(client: httpx.Client, boot: VesselProcess, drive: Drive) -> int | None:
    """POST /runs with the window's idempotency key; None when the process died mid-call."""
    headers = {**AUTH, "Idempotency-Key": WINDOW_KEY}
    try:
        response = client.post(f"{boot.url}/runs", json=drive.body(), headers=headers)
    except httpx.TransportError:
        drive.notes.append("boot 1 died before answering POST /runs")
        return None
    if response.status_code not in (200, 201):
        raise ReceiptError(f"POST /runs answered {response.status_code}: {response.text[:300]}")
    drive.run_id = response.json()["id"]
    return response.status_code


def run_view(client: httpx.Client, boot: VesselProcess, drive: Drive) -> dict[str, Any]:
    response = client.get(f"{boot.url}/runs/{drive.run_id}", headers=AUTH)
    if response.status_code != 200:
        raise ReceiptError(f"GET /runs answered {response.status_code}: {response.text[:300]}")
    body: dict[str, Any] = response.json()
    return body


def wait_status(
    client: httpx.Client, boot: VesselProcess, drive: Drive, wanted: tuple[str, ...],
    within: float = 60.0,
) -> dict[str, Any]:
    deadline = time.monotonic() + within
    view: dict[str, Any] = {}
    while time.monotonic() < deadline:
        view = run_view(client, boot, drive)
        if view["status"] in wanted:
            return view
        time.sleep(0.2)
    raise ReceiptError(f"Run {drive.run_id} still {view.get('status')} after {within:g}s, "
                       f"wanted {wanted}")


def decide(client: httpx.Client, boot: VesselProcess, consent_id: str) -> None:
    with contextlib.suppress(httpx.TransportError):  # the window may kill the process here
        client.post(f"{boot.url}/consents/{consent_id}/decision", json={"approve": True},
                    headers=AUTH)


def cancel(client: httpx.Client, boot: VesselProcess, drive: Drive) -> None:
    with contextlib.suppress(httpx.TransportError):
        client.post(f"{boot.url}/runs/{drive.run_id}/cancel", headers=AUTH)


# -- boot 1: into the window ----------------------------------------------------------


def into_by_submit(client: httpx.Client, boot: VesselProcess, drive: Drive) -> None:
    submit(client, boot, drive)


def into_by_verdict(client: httpx.Client, boot: VesselProcess, drive: Drive) -> None:
    submit(client, boot, drive)
    view = wait_status(client, boot, drive, ("AWAITING_CONSENT",))
    decide(client, boot, view["consent_id"])


def into_by_cancel(client: httpx.Client, boot: VesselProcess, drive: Drive) -> None:
    submit(client, boot, drive)
    wait_status(client, boot, drive, ("AWAITING_CONSENT",))
    cancel(client, boot, drive)


def into_by_shutdown(client: httpx.Client, boot: VesselProcess, drive: Drive) -> None:
    submit(client, boot, drive)
    wait_status(client, boot, drive, TERMINAL)
    assert boot.proc is not None
    boot.proc.terminate()  # SIGTERM: the crash plan fires inside the shutdown


# -- boot 2: to the end ---------------------------------------------------------------


def to_the_end(client: httpx.Client, boot: VesselProcess, drive: Drive) -> dict[str, Any]:
    """Replay the admission (200 when boot 1 admitted it), approve any consent, wait."""
    submit(client, boot, drive)
    deadline = time.monotonic() + 90.0
    decided: set[str] = set()
    while time.monotonic() < deadline:
        view = run_view(client, boot, drive)
        if view["status"] in TERMINAL:
            return view
        if view["status"] == "AWAITING_CONSENT" and view["consent_id"] not in decided:
            decided.add(view["consent_id"])
            drive.notes.append(f"boot 2 found the Run parked on consent {view['consent_id']}")
            decide(client, boot, view["consent_id"])
        time.sleep(0.2)
    raise ReceiptError(f"Run {drive.run_id} did not end within 90s")


Check = Callable[[LedgerDump, Drive], list[str]]


def _one_run(dump: LedgerDump) -> Any:
    return dump.runs[0] if len(dump.runs) == 1 else None


def lost(dump: LedgerDump, drive: Drive) -> list[str]:
    run = _one_run(dump)
    if run is None or run.status.value != "FAILED" or not (run.error or "").startswith(
            LOST_PREFIX):
        return [f"expected the Run FAILED as lost, found {run and (run.status, run.error)}"]
    return []


def one_hop(dump: LedgerDump, drive: Drive) -> list[str]:
    run = _one_run(dump)
    return [] if run is not None and run.seq == 0 else ["expected exactly one delivery"]


def parked_then_resumed(dump: LedgerDump, drive: Drive) -> list[str]:
    run = _one_run(dump)
    problems = []
    if run is None or run.seq != 1:
        problems.append(f"expected one resume hop (seq 1), found {run and run.seq}")
    live = [c for c in dump.consents if c.status.value != "CANCELLED"]
    if len(live) != 1 or run is None or run.consent_id != live[0].id:
        problems.append("expected the Run to own exactly its one consent")
    return problems


def no_consent(dump: LedgerDump, drive: Drive) -> list[str]:
    return [] if not dump.consents else ["expected no consent row"]


def no_pending_consent(dump: LedgerDump, drive: Drive) -> list[str]:
    pending = [c for c in dump.consents if c.status.value == "PENDING"]
    return [] if not pending else ["a consent is still PENDING after CANCELLED"]


def one_terminal_step(dump: LedgerDump, drive: Drive) -> list[str]:
    terminal = [s for s in dump.steps if s.kind in ("run.done", "run.failed", "run.cancelled")]
    return [] if len(terminal) == 1 else [f"expected one terminal Step, found {len(terminal)}"]


def no_checkpoint(dump: LedgerDump, drive: Drive) -> list[str]:
    return [] if not dump.checkpoints else ["the terminal Run still has a checkpoint"]


def _service_rows(drive: Drive) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The service attempts and the reference provider's jobs in the receipt's database."""
    assert drive.dsn is not None
    with psycopg.connect(drive.dsn, connect_timeout=5, row_factory=dict_row) as conn:
        attempts = conn.execute(
            "SELECT id, run_id, state, transmissions, provider_job_id, evidence "
            "FROM service_job_attempt ORDER BY created_at").fetchall()
        exists = conn.execute("SELECT to_regclass('reference_provider_job') AS t").fetchone()
        jobs = conn.execute(
            "SELECT provider_job_id, idempotency_key, transmissions FROM reference_provider_job"
        ).fetchall() if exists and exists["t"] else []
    return attempts, jobs


def nothing_sent(dump: LedgerDump, drive: Drive) -> list[str]:
    attempts, jobs = _service_rows(drive)
    problems = [f"expected no service attempt, found {len(attempts)}"] if attempts else []
    return problems + ([f"the provider started {len(jobs)} jobs"] if jobs else [])


def sent_once(dump: LedgerDump, drive: Drive) -> list[str]:
    """One attempt, owned by and bound to the Run, one provider job for its key, and
    the Run resumed exactly once from that attempt's proven success."""
    attempts, jobs = _service_rows(drive)
    run = _one_run(dump)
    if len(attempts) != 1 or run is None:
        return [f"expected one service attempt of one Run, found {len(attempts)}"]
    attempt, problems = attempts[0], []
    if str(attempt["run_id"]) != str(run.id) or run.service_attempt_id != attempt["id"]:
        problems.append("the attempt is not the Run's own service wait")
    if attempt["state"] != "SUCCEEDED" or run.seq != 1:
        problems.append(f"expected SUCCEEDED and one resume, found {attempt['state']} at "
                        f"seq {run.seq}")
    if len(jobs) != 1 or jobs[0]["provider_job_id"] != attempt["provider_job_id"]:
        problems.append(f"expected one provider job for the attempt, found {jobs}")
    if attempt["transmissions"] != 1:
        problems.append(f"the attempt was transmitted {attempt['transmissions']} times")
    return problems


@dataclass(frozen=True)
class Window:
    point: str
    pattern: str
    expect: str
    into: Callable[[httpx.Client, VesselProcess, Drive], None] = into_by_submit
    checks: tuple[Check, ...] = ()
    content: dict[str, Any] = field(default_factory=dict)
    dies_before_ready: bool = False
    unreachable: str | None = None
    """Why a real process cannot be driven into this window over HTTP, if it cannot."""
    app: str | None = None
    """The `module:attribute` of a user's app whose Patterns both boots serve
    (`vessel serve --app`); None: the shipped Patterns (harness.receipts.app)."""

    def serve_args(self) -> tuple[str, ...]:
        return () if self.app is None else ("--app", self.app)

    @property
    def scenario(self) -> str:
        if self.app is None:
            return f"http:{self.pattern}"
        return f"app:{self.app}" if self.unreachable else f"app:{self.app}:{self.pattern}"


WINDOWS: dict[str, Window] = {w.point: w for w in (
    Window(faults.ADMIT_COMMITTED, "echo", "DONE", checks=(one_hop, one_terminal_step)),
    Window(faults.RELEASE_COMMITTED, "echo", "DONE",
           unreachable="HTTP admissions carry no caller-retention hook, so nothing is HELD"),
    Window(faults.PUBLISH_SENT_BEFORE_ACK, "echo", "DONE", checks=(one_hop,)),
    Window(faults.CLAIM_COMMITTED, "echo", "FAILED", checks=(lost,)),
    Window(faults.EFFECT_APPLIED, "two_step", "FAILED", checks=(lost,)),
    Window(faults.SETTLE_TERMINAL_COMMITTED, "echo", "DONE", checks=(one_terminal_step,)),
    Window(faults.SETTLE_EVIDENCE_WRITTEN, "echo", "DONE",
           checks=(one_terminal_step, no_checkpoint)),
    Window(faults.CONSENT_CHECKPOINT_SAVED, "consent_gate", "FAILED",
           checks=(lost, no_consent)),
    Window(faults.CONSENT_ROW_SAVED, "consent_gate", "DONE", checks=(parked_then_resumed,)),
    Window(faults.CONSENT_DECIDED, "consent_gate", "DONE", into=into_by_verdict,
           checks=(parked_then_resumed,)),
    Window(faults.READMIT_COMMITTED, "consent_gate", "DONE", into=into_by_verdict,
           checks=(parked_then_resumed,)),
    Window(faults.DELEGATE_CHECKPOINT_SAVED, "delegate", "FAILED", checks=(lost,)),
    Window(faults.DELEGATE_SUBMITTED, "delegate", "DONE"),
    Window(faults.SERVICE_CHECKPOINT_SAVED, "service_call", "FAILED",
           checks=(lost, nothing_sent)),
    Window(faults.SERVICE_PARKED, "service_call", "DONE", checks=(sent_once, no_checkpoint)),
    Window(faults.SERVICE_SUBMITTED_BEFORE_ACK, "service_call", "DONE", checks=(sent_once,)),
    Window(faults.HARDWARE_AWAITING, "hardware", "FAILED", checks=(lost,),
           content={"needs": ["gpu"]}),
    Window(faults.CANCEL_CANCELLING_COMMITTED, "consent_gate", "CANCELLED", into=into_by_cancel,
           checks=(no_pending_consent, no_checkpoint)),
    Window(faults.CANCEL_CONTAINED, "consent_gate", "CANCELLED", into=into_by_cancel,
           checks=(no_pending_consent,)),
    Window(faults.SHUTDOWN_STARTED, "echo", "DONE", into=into_by_shutdown,
           checks=(one_terminal_step,)),
    Window(faults.RECONCILE_STARTED, "echo", "DONE", dies_before_ready=True),
)}
