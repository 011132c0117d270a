"""Delegated jobs across real processes, and the receipts that prove them (issue 8 item 6).

A `Lifecycle` owns the real processes of one check on one database: any
number of `vessel serve --agents leased --workspace W` boots
(`harness.receipts.process.VesselProcess`) and `vessel jobs work` workers
(`WorkerProcess`), each with its output in a file. The check drives them
over HTTP and signals; `Lifecycle.finish` then reads every PostgreSQL row
that matters (the ledger dump, the SAQ jobs, each leased job with its
evidence, attempt events and interpretations), runs the simulator's
history-free invariants and the leased checks below, and writes one JSON
receipt, the same spirit as `harness.receipts.lifecycle`. The checks
themselves (one named scenario each) are `harness.receipts.leased_checks`.

Leased checks (seed 004_85033eb8fc772f12.txt, "Leases and fences", "Bounded
retries", "Alpha.2 accounting"; seed 000, "Delegated AgentJob labor"):
- identity: every AgentJob has exactly one leased job under its own id and
  one evidence row under the derived id; nothing was received twice;
- no evidence lost: the evidence holds the AgentJob's request exactly, its
  digest is intact, and a published job's bundle is its interpretation's;
- budgets held: attempts and reserved calls within their limits, one
  `started` event per reserved call (a killed process still consumed it),
  the fence equal to the claims made, every claim closed by an outcome or an
  expired lease unless its lease is still live, event indices gap-free;
- agreement: a terminal AgentJob agrees with its leased job, a DONE Run
  carries the leased job's published bundle.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import httpx
import psycopg

from harness.catalogue_check import code_digest
from harness.receipts.lifecycle import snapshot, versions
from harness.receipts.process import AUTH, ReceiptError, VesselProcess
from runtime.adapters.leased_agents import evidence_id, report_of, request_text
from runtime.jobs import (
    AttemptEvent,
    EventKind,
    EvidenceRecord,
    Interpretation,
    JobState,
    LeasedJob,
)
from runtime.models import AgentJobStatus, LedgerDump, RunStatus
from sim.checker import check_static

T = TypeVar("T")

WORKSPACE = "delegates"
WORKER_READY_S = 30.0
CLOSING = (EventKind.COMPLETED, EventKind.FAILED, EventKind.EXPIRED_LEASE)
TERMINAL = ("DONE", "FAILED", "CANCELLED")


def vessel_args(workspace: str = WORKSPACE) -> tuple[str, ...]:
    return ("--agents", "leased", "--workspace", workspace)


@dataclass
class WorkerProcess:
    """One `vessel jobs work` process with short leases (no check waits 90 s)."""

    dsn: str
    workdir: Path
    name: str
    workspace: str = WORKSPACE
    lease_s: float = 3.0
    renew_every_s: float = 1.0
    model_deadline_s: float = 30.0
    retry_base_s: float = 0.5
    idle_s: float = 0.2
    model_script: str | None = None
    crash_at: str | None = None
    """VESSEL_JOBS_CRASH_AT: SIGKILL right after that JobStore call committed."""
    crash_point: str | None = None
    """VESSEL_CRASH_AT: SIGKILL at that catalogued fault point (`job.inference_returned`)."""
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    ended_at: float | None = None
    signals: list[str] = field(default_factory=list)
    paused: bool = False

    @property
    def log(self) -> Path:
        return self.workdir / f"{self.name}.log"

    def start(self) -> WorkerProcess:
        env = {k: v for k, v in os.environ.items()
               if k not in ("VESSEL_JOBS_CRASH_AT", "VESSEL_CRASH_AT", "VESSEL_DSN")}
        env["PYTHONUNBUFFERED"] = "1"
        if self.crash_at is not None:
            env["VESSEL_JOBS_CRASH_AT"] = self.crash_at
        if self.crash_point is not None:
            env["VESSEL_CRASH_AT"] = self.crash_point
        argv = [sys.executable, "-m", "runtime.app.cli", "jobs", "work", "--dsn", self.dsn,
                "--workspace", self.workspace, "--worker-id", self.name,
                "--lease-s", str(self.lease_s), "--renew-every-s", str(self.renew_every_s),
                "--model-deadline-s", str(self.model_deadline_s),
                "--retry-base-s", str(self.retry_base_s), "--idle", str(self.idle_s)]
        if self.model_script is not None:
            argv += ["--model-script", self.model_script]
        self.started_at = time.time()
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
        return self

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def wait_ready(self) -> None:
        deadline = time.monotonic() + WORKER_READY_S
        while time.monotonic() < deadline:
            if "ready: workspace" in self.output():
                return
            if self.returncode is not None:
                raise ReceiptError(f"{self.name} exited {self.returncode} before ready:\n"
                                   f"{self.output()[-2000:]}")
            time.sleep(0.05)
        raise ReceiptError(f"{self.name} not ready within {WORKER_READY_S:g}s")

    def signal(self, signum: signal.Signals) -> None:
        assert self.proc is not None
        self.signals.append(signum.name)
        self.proc.send_signal(signum)

    def pause(self) -> None:
        """SIGSTOP: the whole process stalls (its lease renewals too), as in a long GC
        pause or a frozen VM; `resume` lets it go on where it stood."""
        self.signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        self.signal(signal.SIGCONT)
        self.paused = False

    def wait_exit(self, within: float) -> int:
        assert self.proc is not None
        try:
            code = self.proc.wait(timeout=within)
        except subprocess.TimeoutExpired:
            raise ReceiptError(f"{self.name} still alive {within:g}s later") from None
        self.ended_at = time.time()
        return code

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.signal(signal.SIGKILL)
            self.proc.wait()
            self.ended_at = time.time()

    def describe(self) -> dict[str, Any]:
        code = self.returncode
        return {
            "name": self.name,
            "kind": "vessel jobs work",
            "pid": self.proc.pid if self.proc else None,
            "model_script": self.model_script,
            "crash_plan": self.crash_at,
            "crash_point": self.crash_point,
            "lease_s": self.lease_s,
            "signals": list(self.signals),
            "exit_code": code,
            "exit_signal": signal.Signals(-code).name if code is not None and code < 0 else None,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
        }


# -- reading the rows -------------------------------------------------------------------


@dataclass
class LeasedRecord:
    job: LeasedJob
    evidence: EvidenceRecord | None
    events: list[AttemptEvent]
    interpretations: list[Interpretation]

    def as_dict(self) -> dict[str, Any]:
        return {
            "job": self.job.model_dump(mode="json"),
            "evidence": None if self.evidence is None else self.evidence.model_dump(mode="json"),
            "events": [e.model_dump(mode="json") for e in self.events],
            "interpretations": [i.model_dump(mode="json") for i in self.interpretations],
        }


def leased_records(dsn: str, workspace: str = WORKSPACE) -> list[LeasedRecord]:
    from runtime.adapters.postgres.jobs_store import PostgresJobStore

    async def read() -> list[LeasedRecord]:
        store = await PostgresJobStore.connect(dsn)
        try:
            out = []
            for job in await store.jobs(workspace):
                out.append(LeasedRecord(job, await store.evidence(job.evidence_id),
                                        await store.attempts(job.id),
                                        await store.interpretations(job.id)))
            return out
        finally:
            await store.close()

    return asyncio.run(read())


def evidence_rows(dsn: str) -> int:
    with psycopg.connect(dsn, connect_timeout=5) as conn:
        row = conn.execute("SELECT count(*) FROM job_evidence").fetchone()
    return int(row[0]) if row else 0


def leased_problems(dump: LedgerDump, records: list[LeasedRecord], evidence_count: int,
                    now: datetime) -> list[str]:
    """Identity, evidence and budget checks over every delegated job (module docstring)."""
    problems: list[str] = []
    by_id = {r.job.id: r for r in records}
    agent_ids = {j.id for j in dump.agent_jobs}
    for extra in sorted(set(by_id) - agent_ids, key=str):
        problems.append(f"leased job {extra} belongs to no AgentJob")
    if evidence_count != len(records):
        problems.append(f"{evidence_count} evidence rows for {len(records)} leased jobs")
    for agent in dump.agent_jobs:
        record = by_id.get(agent.id)
        if record is None:
            problems.append(f"AgentJob {agent.id} was never received as a leased job")
            continue
        job, where = record.job, f"leased job {agent.id}"
        evidence = record.evidence
        if evidence is None or evidence.id != evidence_id(agent.id):
            problems.append(f"{where}: its evidence is missing")
        else:
            if evidence.payload != request_text(agent.request):
                problems.append(f"{where}: the evidence no longer holds the request")
            if evidence.digest != hashlib.sha256(evidence.payload.encode()).hexdigest():
                problems.append(f"{where}: the evidence digest does not match")
        problems += _budget_problems(record, now)
        if agent.status is AgentJobStatus.SUCCEEDED and job.state is not JobState.PUBLISHED:
            problems.append(f"{where}: AgentJob SUCCEEDED but the leased job is {job.state}")
        if agent.status is AgentJobStatus.FAILED and job.state not in (
                JobState.FAILED, JobState.EXHAUSTED):
            problems.append(f"{where}: AgentJob FAILED but the leased job is {job.state}")
        if agent.status is AgentJobStatus.CANCELLED and (
                not job.state.terminal or job.leased_at(now)):
            problems.append(f"{where}: AgentJob CANCELLED but the leased job is not contained")
        if job.state is JobState.PUBLISHED:
            staged = [i for i in record.interpretations if i.number == job.interpretation]
            if len(staged) != 1 or staged[0].bundle != job.bundle:
                problems.append(f"{where}: its published bundle is not its interpretation's")
    for run in dump.runs:
        if run.status is RunStatus.DONE and run.agent_job_id in by_id:
            expected = report_of(by_id[run.agent_job_id].job).result
            if (run.result or {}).get("answer") != expected:
                problems.append(f"Run {run.id} DONE without its leased job's bundle")
    return problems


def _budget_problems(record: LeasedRecord, now: datetime) -> list[str]:
    job, events, where = record.job, record.events, f"leased job {record.job.id}"
    problems = []
    if job.attempts_used > job.max_attempts:
        problems.append(f"{where}: {job.attempts_used} attempts > {job.max_attempts}")
    if job.model_calls_reserved > job.max_model_calls:
        problems.append(f"{where}: {job.model_calls_reserved} calls > {job.max_model_calls}")
    started = [e for e in events if e.kind is EventKind.STARTED]
    if len(started) != job.model_calls_reserved:
        problems.append(f"{where}: {len(started)} started events for "
                        f"{job.model_calls_reserved} reserved calls")
    if job.fence != job.attempts_used:
        problems.append(f"{where}: fence {job.fence} after {job.attempts_used} claims")
    if [e.index for e in events] != list(range(len(events))):
        problems.append(f"{where}: attempt events are not gap-free")
    live = job.leased_at(now)
    for fence in range(1, job.fence + 1):
        if fence == job.fence and live:
            continue
        if not any(e.fence == fence and e.kind in CLOSING and e.refused is None
                   for e in events):
            problems.append(f"{where}: the attempt of fence {fence} was never closed")
    return problems


# -- one lifecycle ---------------------------------------------------------------------


@dataclass
class Lifecycle:
    """The processes, notes and receipt of one real-process check."""

    name: str
    scenario: str
    dsn: str
    workdir: Path
    vessels: list[VesselProcess] = field(default_factory=list)
    workers: list[WorkerProcess] = field(default_factory=list)
    notes: list[dict[str, Any]] = field(default_factory=list)
    receipt: dict[str, Any] = field(default_factory=dict)
    t0: float = field(default_factory=time.monotonic)
    out: Path | None = None
    """Where the receipt goes (default: `workdir`, beside the process logs)."""

    def note(self, text: str, **data: Any) -> None:
        self.notes.append({"t": round(time.monotonic() - self.t0, 3), "note": text, **data})

    def observe(self, **facts: Any) -> None:
        """Facts the check saw while driving (the receipt's `observed`), for readers and tests."""
        self.receipt.setdefault("observed", {}).update(facts)

    def vessel(self, name: str, *, crash_at: str | None = None, migrate: bool = False,
               port: int | None = None) -> VesselProcess:
        boot = VesselProcess(self.dsn, self.workdir, name, crash_at=crash_at, migrate=migrate,
                             args=vessel_args())
        if port is not None:
            boot.port = port
        self.vessels.append(boot.start())
        self.note(f"started {name}", crash_plan=crash_at)
        return boot

    def worker(self, name: str, **options: Any) -> WorkerProcess:
        worker = WorkerProcess(self.dsn, self.workdir, name, **options)
        self.workers.append(worker.start())
        self.note(f"started {name}", **{k: v for k, v in options.items() if v is not None})
        return worker

    def close(self) -> None:
        """Stop whatever still runs: SIGTERM first (recorded), SIGKILL if it lingers."""
        for worker in self.workers:
            if worker.returncode is None and worker.proc is not None:
                if worker.paused:
                    worker.resume()
                worker.signal(signal.SIGTERM)
                try:
                    worker.wait_exit(15)
                except ReceiptError:
                    worker.kill()
        for boot in self.vessels:
            if boot.returncode is None and boot.proc is not None:
                self.note(f"{boot.name} stopped with SIGTERM at the end")
                boot.stop()

    def finish(self, *, run_id: str | None, expect: str | None,
               problems: list[str] | None = None) -> dict[str, Any]:
        """Read the rows, run every check, write the receipt; returns it."""
        after = snapshot(self.dsn)
        records = leased_records(self.dsn)
        count = evidence_rows(self.dsn)
        from runtime.adapters.system import SystemClock

        found = list(problems or [])
        found += leased_problems(after.dump, records, count, SystemClock().now())
        invariants = check_static(after.dump, after.jobs)
        found += [f"{v['invariant']}: {v['message']}" for v in invariants if not v["held"]]
        run = next((r for r in after.dump.runs if str(r.id) == run_id), None)
        if expect is not None and (run is None or run.status.value != expect):
            found.append(f"expected the Run {expect}, found {run and run.status.value}")
        self.receipt.update(
            run_id=run_id, expected=expect, final=run and run.status.value,
            run_error=run and run.error, notes=self.notes,
            ledger_after={"digest": after.digest(), "rows": after.rows()},
            leased=[r.as_dict() for r in records], evidence_rows=count,
            invariants=invariants, problems=found,
            verdict="proved" if not found else "failed",
        )
        return self.receipt

    def write(self) -> Path:
        self.receipt.setdefault("verdict", "failed")
        self.receipt["processes"] = ([b.describe() | {"kind": "vessel serve"}
                                      for b in self.vessels]
                                     + [w.describe() for w in self.workers])
        self.receipt["ended_at"] = time.time()
        self.receipt["seconds"] = round(self.receipt["ended_at"]
                                        - self.receipt.get("started_at", self.receipt["ended_at"]),
                                        2)
        path = (self.out or self.workdir) / f"{self.name}.json"
        path.write_text(json.dumps(self.receipt, indent=2, sort_keys=True, default=str) + "\n")
        return path


@contextmanager
def lifecycle(name: str, scenario: str, dsn: str, workdir: Path, *, out: Path | None = None,
              proves: str | None = None, kind: str = "leased") -> Iterator[Lifecycle]:
    """A Lifecycle whose receipt is written however the check ends (a failure included).

    `name` is the receipt's `window` too (e.g. `leased.worker_killed_reclaimed`);
    `proves` names the catalogued crash window the check proves, if it proves one.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    life = Lifecycle(name, scenario, dsn, workdir, out=out)
    life.receipt.update(check=name, window=name, kind=kind, scenario=scenario,
                        proves=proves, code_digest=code_digest(), versions=versions(dsn),
                        started_at=time.time())
    try:
        yield life
    except BaseException as exc:
        reason = f"{type(exc).__name__}: {exc}"
        life.receipt.update(verdict="failed", reason=reason, problems=[reason])
        raise
    finally:
        life.close()
        life.write()


# -- driving -------------------------------------------------------------------------


def submit_delegate(client: httpx.Client, boot: VesselProcess, key: str,
                    task: str = "summarise") -> str | None:
    """POST a `delegate` Run; its id, or None when the process died before answering."""
    body = {"pattern": "delegate", "prompt": "delegated across processes",
            "content": {"task": task}}
    try:
        response = client.post(f"{boot.url}/runs", json=body,
                               headers={**AUTH, "Idempotency-Key": key})
    except httpx.TransportError:
        return None
    if response.status_code not in (200, 201):
        raise ReceiptError(f"POST /runs answered {response.status_code}: {response.text[:300]}")
    return str(response.json()["id"])


def run_view(client: httpx.Client, boot: VesselProcess, run_id: str) -> dict[str, Any]:
    response = client.get(f"{boot.url}/runs/{run_id}", headers=AUTH)
    if response.status_code != 200:
        raise ReceiptError(f"GET /runs answered {response.status_code}: {response.text[:300]}")
    body: dict[str, Any] = response.json()
    return body


def wait_run(client: httpx.Client, boot: VesselProcess, run_id: str,
             wanted: tuple[str, ...], within: float = 30.0) -> dict[str, Any]:
    return wait_for(lambda: _if_status(run_view(client, boot, run_id), wanted), within,
                    f"Run {run_id} in {wanted}")


def _if_status(view: dict[str, Any], wanted: tuple[str, ...]) -> dict[str, Any] | None:
    return view if view["status"] in wanted else None


def wait_for(probe: Callable[[], T | None], within: float, what: str,
             every: float = 0.1) -> T:
    deadline = time.monotonic() + within
    while True:
        found = probe()
        if found is not None:
            return found
        if time.monotonic() >= deadline:
            raise ReceiptError(f"not within {within:g}s: {what}")
        time.sleep(every)


def leased_row(dsn: str, job_id: str) -> dict[str, Any] | None:
    """The leased job and its events as they stand (sync, for polling)."""
    with psycopg.connect(dsn, connect_timeout=5) as conn:
        cur = conn.execute(
            "SELECT state, fence, lease_owner, lease_expires_at, lease_renewed_at, "
            "attempts_used, model_calls_reserved, settled_fence, bundle, error "
            "FROM leased_job WHERE id = %s",
            (job_id,))
        row = cur.fetchone()
        if row is None:
            return None
        names = [c.name for c in cur.description or ()]
        job = dict(zip(names, row, strict=True))
        events = conn.execute(
            "SELECT kind, fence, worker, usage, refused, detail FROM leased_job_event "
            "WHERE job_id = %s ORDER BY idx", (job_id,)).fetchall()
    job["events"] = [dict(zip(("kind", "fence", "worker", "usage", "refused", "detail"), e,
                              strict=True)) for e in events]
    return job


def agent_job_of(dsn: str, run_id: str) -> str | None:
    with psycopg.connect(dsn, connect_timeout=5) as conn:
        row = conn.execute("SELECT id FROM agent_job WHERE run_id = %s", (run_id,)).fetchone()
    return None if row is None else str(row[0])


def the_agent_job(dsn: str) -> str | None:
    """The one AgentJob of a fresh database, once it exists."""
    with psycopg.connect(dsn, connect_timeout=5) as conn:
        rows = conn.execute("SELECT id FROM agent_job").fetchall()
    if len(rows) > 1:
        raise ReceiptError(f"{len(rows)} AgentJobs where one was expected")
    return str(rows[0][0]) if rows else None


def event_kinds(job: dict[str, Any]) -> list[tuple[str, int]]:
    return [(e["kind"], int(e["fence"])) for e in job["events"]]
