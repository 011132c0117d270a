"""Invariants of startup's degraded triggers (issue M12, item 5).

Seed 000_81a5c720b14d934a.txt, "Cancellation, mutation, and recovery"
(startup reconciliation): an active broker row without a trustworthy start
timestamp degrades recovery, and missing or mismatched delivery truth makes
the pass degraded. The fault kinds START_UNRECORDED and DELIVERY_DRIFT
(sim.faults.proxies) give one boot's startup such a view of a QUEUED Run;
the proxies report each one here as it is injected. Two rules follow:

- `live_hop_not_fenced`: a boot that saw a hop job active without its start
  time never aborts that job while its Run still waits QUEUED at that
  sequence: nothing proved the job belongs to an earlier boot;
- `startup_degrades_honestly`: a startup that saw such a doubt about a Run
  that is still QUEUED at that sequence (the job still active, the row still
  truly PENDING or PUBLISHED) reports itself degraded; the strict profile
  then refuses to serve instead of reporting ready;
- `queued_job_retained`: a hop job still waiting at the broker (never dequeued)
  is never aborted or retired while its Run waits QUEUED at that sequence:
  startup and the relay retain it (only a cancellation, which moves the Run
  off QUEUED first, aborts a queued job);
- `delivery_verdict_true`: a startup report names a QUEUED Run corrupt only when
  its delivery row is missing, and mismatched only when a row exists (one the
  boot read out of step), so the operator is told which truth is broken;
- `redelivered_promptly` (issue 15, M11): a hop job that a boot dequeued
  and died holding, its Run never claimed, is retired and re-delivered by a
  later boot; the broker's heartbeat sweep ending it under a boot that has
  served for a while means recovery waited minutes for nothing;
- `startup_refired_true` (M9): the Runs a startup report lists as refired
  are exactly those whose consent, delegate or service wait that startup's
  own wait pass re-admitted: each `readmit_after_*` transaction its
  reconciliation task committed, and was answered, while it paged the
  AWAITING_CONSENT, AWAITING_DELEGATE and AWAITING_SERVICE Runs. A re-admission
  made by orphan recovery (a window parked on an already decided consent) is
  not a refire, and one whose answer was lost (an ambiguous commit, retried
  into a refusal) the startup cannot know of.

Like the rest of the checker these read only durable records, the broker's
own books and what the fault proxies injected; violations go through
`Checker.fail`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING
from uuid import UUID

import trio

from runtime.keys import parse_hop_key
from runtime.models import DeliveryState, RunStatus
from runtime.seams import JobStatus

if TYPE_CHECKING:
    from sim.checker import Checker

WAITING = (JobStatus.NEW, JobStatus.DEFERRED, JobStatus.QUEUED)
"""Broker statuses of a job no worker has taken yet."""

WAITS = frozenset({RunStatus.AWAITING_CONSENT, RunStatus.AWAITING_DELEGATE,
                   RunStatus.AWAITING_SERVICE})
"""The statuses of startup's wait pass (consent, delegate, service re-admission)."""

PROMPT_S = 30.0
"""Serving time within which a boot must have re-delivered a stranded job: its
startup and several relay passes (every 5 s), far below the 120 s heartbeat."""

INVARIANTS = (
    ("live_hop_not_fenced", "a boot that saw a hop job active without a start time never "
     "aborts it while its Run waits QUEUED at that sequence: an untrusted start is no proof "
     "of an earlier boot", "seed 000 'Cancellation, mutation, and recovery' (an active row "
     "without a trustworthy start timestamp degrades recovery)"),
    ("startup_degrades_honestly", "a startup that saw a QUEUED Run's hop job active without "
     "a start time, or its delivery row out of step with it, reports degraded (and the "
     "strict profile refuses) while that Run still waits QUEUED at that sequence",
     "seed 000 'Cancellation, mutation, and recovery' (missing or mismatched delivery truth "
     "makes the pass degraded; PostgreSQL startup aborts when degraded)"),
    ("queued_job_retained", "a hop job still queued at the broker (never dequeued) is never "
     "aborted or retired while its Run waits QUEUED at that sequence: recovery retains it",
     "seed 000 'Cancellation, mutation, and recovery' (startup recovers every QUEUED Run's "
     "exact delivery: a queued job is retained)"),
    ("delivery_verdict_true", "a startup report calls a Run still QUEUED at its sequence "
     "corrupt only when that sequence has no delivery row, and mismatched only when it "
     "has one", "seed 000 'Cancellation, mutation, and recovery' (the scan starts from "
     "every queued Run, so a missing delivery row is reported as corruption; mismatched "
     "delivery truth degrades the pass)"),
    ("redelivered_promptly", "a hop job a dead boot dequeued and never claimed is re-delivered "
     "by a later boot's startup or relay: the broker's heartbeat sweep never has to end it "
     f"while its Run waits QUEUED and a boot has served for {PROMPT_S:g} s",
     "issue 15, M11 item 3 (no wait for SAQ's sweep); seed 000 'Cancellation, mutation, "
     "and recovery' (exact-key rules)"),
    ("startup_refired_true", "a startup report lists as refired exactly the waiting Runs "
     "(consent, delegate, service) whose wait its own wait pass re-admitted, each as often "
     "as it did", "seed 000 'Cancellation, mutation, and recovery' (startup re-admits "
     "decided consents, terminal delegated waits and proven service waits)"),
)


@dataclass
class StartupChecks:
    checker: Checker
    unrecorded: dict[int, set[str]] = field(default_factory=dict)
    """Per boot number: hop keys whose job it saw active without a start time."""
    drifted: dict[int, set[str]] = field(default_factory=dict)
    """Per boot number: hop keys whose delivery row it read out of step with the Run."""
    ready_at: dict[int, datetime] = field(default_factory=dict)
    """Per boot number: when it finished startup and began to serve."""
    reconciling: dict[int, trio.lowlevel.Task] = field(default_factory=dict)
    """Per boot number still reconciling: the task its reconciliation runs in."""
    in_wait_pass: set[int] = field(default_factory=set)
    """Boots whose reconciliation task last paged Runs of wait statuses only."""
    readmitted: dict[int, list[UUID]] = field(default_factory=dict)
    """Per boot number: the Runs its wait pass re-admitted (answered commits), in order."""

    def on_reconcile_started(self, boot: int) -> None:
        self.reconciling[boot] = trio.lowlevel.current_task()
        self.readmitted[boot] = []

    def _reconcile_task(self, boot: int) -> bool:
        task = self.reconciling.get(boot)
        return task is not None and task is trio.lowlevel.current_task()

    def on_page(self, boot: int, statuses: Collection[RunStatus]) -> None:
        """Boot `boot` read a page of Runs in `statuses`: its reconciliation task
        is in the wait pass while it pages wait statuses only."""
        if self._reconcile_task(boot):
            if statuses and all(s in WAITS for s in statuses):
                self.in_wait_pass.add(boot)
            else:
                self.in_wait_pass.discard(boot)

    def on_readmit(self, boot: int, run_id: UUID) -> None:
        """Boot `boot`'s readmit_after_* of `run_id` committed and was answered."""
        if boot in self.in_wait_pass and self._reconcile_task(boot):
            self.readmitted[boot].append(run_id)

    def on_start_unrecorded(self, boot: int, key: str) -> None:
        self.unrecorded.setdefault(boot, set()).add(key)

    def on_delivery_drift(self, boot: int, key: str) -> None:
        self.drifted.setdefault(boot, set()).add(key)

    def on_abort(self, boot: int, key: str) -> None:
        """live_hop_not_fenced and queued_job_retained, as boot `boot` sends an abort
        (or a retire) for `key`."""
        job = self.checker.world.broker.jobs.get(key)
        if job is not None and job.info.status in WAITING and self._queued_at(key):
            self.checker.fail("queued_job_retained", f"boot {boot} aborted hop job {key}, "
                              f"still {job.info.status.value} at the broker, its Run "
                              "waiting QUEUED at that sequence", boot=boot, key=key)
        if key in self.unrecorded.get(boot, ()) and self._job_doubt_stands(key):
            self.checker.fail("live_hop_not_fenced", f"boot {boot} aborted hop job {key} "
                              "whose start time it never saw, its Run still QUEUED",
                              boot=boot, key=key)

    def on_swept(self, boot: int, key: str) -> None:
        """redelivered_promptly, as boot `boot`'s broker sweep ended hop job `key`."""
        job = self.checker.world.broker.jobs.get(key)
        ready = self.ready_at.get(boot)
        if job is None or job.info.boot_id is None or ready is None or not self._queued_at(key):
            return
        taker = next((b for b in self.checker.world.boots if b.id == job.info.boot_id), None)
        if taker is None or taker.alive:
            return
        served = (self.checker.world.clock.now() - ready).total_seconds()
        if served >= PROMPT_S:
            self.checker.fail("redelivered_promptly", f"hop job {key}, dequeued by dead "
                              f"{job.info.boot_id} and never claimed, was left for the sweep: "
                              f"boot {boot} had served {served:g} s", boot=boot, key=key)

    def on_startup_done(self, boot: int, degraded: bool) -> None:
        """startup_degrades_honestly, once boot `boot` finished reconciling and serves."""
        self.ready_at[boot] = self.checker.world.clock.now()
        if degraded:
            return
        jobs = sorted(k for k in self.unrecorded.get(boot, ()) if self._job_doubt_stands(k))
        rows = sorted(k for k in self.drifted.get(boot, ()) if self._row_doubt_stands(k))
        if jobs or rows:
            what = (f"hop job {jobs[0]} active without a start time" if jobs
                    else f"delivery {rows[0]} out of step with its QUEUED Run")
            self.checker.fail("startup_degrades_honestly", f"boot {boot} started clean "
                              f"although it saw {what}", boot=boot, jobs=jobs, rows=rows)

    def on_report(self, boot: int, deliveries: Mapping[str, Collection[UUID]],
                  refired: Collection[UUID] = ()) -> None:
        """delivery_verdict_true and startup_refired_true, as boot `boot`'s
        reconciliation report is read (it serves, or the strict profile refuses).
        A Run still QUEUED then sits at the sequence the startup judged: a corrupt
        or mismatched verdict rotates nothing, and no other boot runs meanwhile,
        or it reads the same row."""
        self._refired_true(boot, refired)
        ledger = self.checker.world.ledger
        for verdict, row_expected in (("corrupt", False), ("mismatched", True)):
            for run_id in sorted(deliveries.get(verdict, ()), key=str):
                run = ledger.run_table.get(run_id)
                if run is None or run.status is not RunStatus.QUEUED:
                    continue
                has_row = (run_id, run.seq) in ledger.delivery_table
                if has_row != row_expected:
                    row = "exists" if has_row else "is missing"
                    self.checker.fail("delivery_verdict_true", f"boot {boot}'s startup "
                                      f"called Run {run_id} {verdict} although its delivery "
                                      f"{run.seq} {row}", boot=boot, run=str(run_id))
                    return

    def _refired_true(self, boot: int, refired: Collection[UUID]) -> None:
        self.reconciling.pop(boot, None)
        self.in_wait_pass.discard(boot)
        done = sorted(self.readmitted.pop(boot, []), key=str)
        told = sorted(refired, key=str)
        if told == done:
            return
        extra = [r for r in told if told.count(r) > done.count(r)]
        if extra:
            run, times = extra[0], done.count(extra[0])
            did = f"re-admitted it only {times} times" if times else "never re-admitted it"
            often = f" {told.count(run)} times" if told.count(run) > 1 else ""
            self.checker.fail("startup_refired_true", f"boot {boot}'s startup reported Run "
                              f"{run} refired{often} although its wait pass {did}",
                              boot=boot, run=str(run))
            return
        missed = next(r for r in done if done.count(r) > told.count(r))
        self.checker.fail("startup_refired_true", f"boot {boot}'s startup re-admitted the "
                          f"wait of Run {missed} but did not report it refired",
                          boot=boot, run=str(missed))

    def _queued_at(self, key: str) -> bool:
        run_id, seq = parse_hop_key(key)
        run = self.checker.world.ledger.run_table.get(run_id)
        return run is not None and run.status is RunStatus.QUEUED and run.seq == seq

    def _job_doubt_stands(self, key: str) -> bool:
        job = self.checker.world.broker.jobs.get(key)
        return job is not None and job.info.status is JobStatus.ACTIVE and self._queued_at(key)

    def _row_doubt_stands(self, key: str) -> bool:
        run_id, seq = parse_hop_key(key)
        d = self.checker.world.ledger.delivery_table.get((run_id, seq))
        open_ = d is not None and d.state in (DeliveryState.PENDING, DeliveryState.PUBLISHED)
        return open_ and self._queued_at(key)
