"""The state checker: invariants over the ledger, the broker and the trace.

It never reads runtime internals. Transition invariants run after every
committed ledger write, comparing the records with those seen after the
previous write; final invariants run once the world is quiescent. Each
invariant is named in `INVARIANTS` with the rule it states and its source
(DESIGN section 6 and the seeds). The first violation stops the simulation.
"""

from __future__ import annotations

import contextlib
import itertools
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

import anyio
from pydantic import ValidationError

from runtime.errors import BrokerUnavailable, LedgerUnavailable
from runtime.graph.snapshots import Checkpoint
from runtime.keys import parse_hop_key
from runtime.models import DeliveryState, Run, RunDelivery, RunStatus
from runtime.seams import JobInfo, JobStatus
from runtime.service.models import ServiceState
from sim import ack_checks, delivery_checks, input_checks, rotation_checks, token_checks
from sim.admission_checks import INVARIANTS as ADMISSION_INVARIANTS
from sim.admission_checks import AdmissionChecks
from sim.boot_checks import INVARIANTS as BOOT_INVARIANTS
from sim.boot_checks import BootChecks
from sim.debt_checks import INVARIANTS as DEBT_INVARIANTS
from sim.debt_checks import DebtChecks
from sim.event_checks import INVARIANTS as EVENT_INVARIANTS
from sim.event_checks import Before, EventChecks
from sim.hop_checks import INVARIANTS as HOP_INVARIANTS
from sim.hop_checks import HopChecks
from sim.mutation_checks import INVARIANTS as MUTATION_INVARIANTS
from sim.mutation_checks import MutationChecks
from sim.outcome_checks import (
    CRASH_WINDOW_INVARIANT,
    OUTCOME_INVARIANTS,
    OutcomeChecks,
    WindowChecks,
)
from sim.page_checks import INVARIANTS as PAGE_INVARIANTS
from sim.page_checks import PageChecks
from sim.relay_checks import INVARIANTS as RELAY_INVARIANTS
from sim.relay_checks import RelayChecks
from sim.retry_checks import INVARIANTS as RETRY_INVARIANTS
from sim.retry_checks import RetryChecks
from sim.startup_checks import INVARIANTS as STARTUP_INVARIANTS
from sim.startup_checks import StartupChecks
from sim.stasis_checks import INVARIANTS as STASIS_INVARIANTS
from sim.stasis_checks import StasisChecks
from sim.tracked import TrackedTable
from sim.work_checks import INVARIANTS as JOB_INVARIANTS
from sim.work_checks import JobChecks, ServiceChecks
from sim.writer_checks import INVARIANTS as WRITER_INVARIANTS
from sim.writer_checks import WriterChecks

if TYPE_CHECKING:
    from types import FrameType

    from runtime.events.channel import RunChannel, Subscription
    from runtime.events.writer import StepWriter
    from runtime.jobs.models import LeasedJob
    from runtime.service.models import Evidence, ServiceJobAttempt, ServiceOutcome
    from sim.leased import CallKey, ModelCall
    from sim.world import Boot, World

CANCEL_ACK_TIMEOUT_S = 10.0
"""The checker's copy of how long a cancel waits for an abort's acknowledgement."""

CANCEL_ACK_POLL_S = 0.5
"""The checker's copy of how often a cancel re-probes an aborted job."""

TERMINAL_STEP_KINDS = frozenset({"run.done", "run.failed", "run.cancelled"})

_EVIDENCE_FAULTS = ('"point":"ledger.steps"', '"point":"ledger.append_step"',
                    '"point":"ledger.append_steps"',
                    '"point":"steps.append"', '"event":"boot.crash"')
"""Trace marks of a fault that may keep a repair from writing its Step."""

_WORLD_FAULTS = ('"boot.crash"', '"fault":"crash"', '"fault":"boot_stall"',
                 '"fault":"boot_partition"', '"fault":"ledger_outage"')
"""Trace marks of a fault that strikes a whole boot, whichever task it fired in."""

CANCEL_UNAVAILABLE: tuple[type[BaseException], ...] = (LedgerUnavailable, BrokerUnavailable)
"""What a cancel may raise instead of answering (besides the world's Unavailable)."""

_CHILD_FAULT_POINTS = ("actor.agent.", "service.")
"""Where a fault on a cancel's own path may leave it CANCELLING: a child's runtime.
A lost abort acknowledgement is re-probed and a ledger blip retried (or raised), so
neither excuses a CANCELLING answer by itself."""
_HOLDING_KINDS = frozenset({"pause", "crash", "boot_stall", "boot_partition", "ledger_outage"})


def _may_stall_a_cancel(fault: str) -> bool:
    """`point:kind` (sim.faults.struck) of a fault that may leave a cancel CANCELLING."""
    point, _, kind = fault.rpartition(":")
    return point.startswith(_CHILD_FAULT_POINTS) or kind in _HOLDING_KINDS


OWNER_WAITS = (
    RunStatus.AWAITING_CONSENT, RunStatus.AWAITING_DELEGATE, RunStatus.AWAITING_SERVICE,
)
"""The waits whose owner CAS may return a Run to QUEUED."""


@dataclass(frozen=True)
class Invariant:
    name: str
    rule: str
    source: str


INVARIANTS: dict[str, Invariant] = {
    i.name: i
    for i in (
        Invariant("terminal_is_final", "a terminal Run never changes again",
                  "seed 003 'Truth closes first'"),
        Invariant("single_claim", "at most one CLAIMED delivery per Run",
                  "seed 000 'Admission and exact claim'"),
        Invariant("claim_is_exact", "a claim moves only a QUEUED Run at exactly the claimed "
                  "sequence, from a PENDING or PUBLISHED delivery, once",
                  "seed 000 'Admission and exact claim'"),
        Invariant("sequences_gap_free", "delivery sequences of a Run are 0..n without gaps and "
                  "the Run points at the newest", "DESIGN section 6"),
        Invariant("settlement_fenced", "terminal settlement lands only on the claimed current "
                  "sequence", "seed 000 'Admission and exact claim'"),
        Invariant("started_at_stable", "started_at never changes after the first claim",
                  "seed 000 'Admission and exact claim'"),
        Invariant("session_fence", "at most one nonterminal Run per Bridge session",
                  "seed 000 'Admission and exact claim'"),
        Invariant("broker_priority", "every broker job has priority 100 - doctrine priority",
                  "seed 000 'Admission and exact claim'"),
        Invariant("hop_key_identity", "a hop key names exactly its Run and sequence and is "
                  "published at most once", "seed 000 'Admission and exact claim'"),
        Invariant("idempotent_admission", "one key admits one Run; a replay with the same content "
                  "returns it, a replay with other content is refused", "seed 000 'Admission'"),
        Invariant("effect_under_claim", "an external effect is performed only by the hop holding "
                  "the Run's current claim", "DESIGN section 6"),
        Invariant("effect_at_most_once", "each effect identity is applied at most once",
                  "DESIGN section 6"),
        Invariant("resume_reads_decided_owner", "a resumed hop is claimed only when the Run's "
                  "exact consent is decided and not cancelled, its exact agent job is terminal, "
                  "or its exact service attempt is terminal and owned by it",
                  "seed 003 'Return makes a new claim'; seed 000 'Service job attempts'"),
        Invariant("no_replay_after_death", "nothing moves a Run back to QUEUED except the owner "
                  "CAS of a consent, delegate or service wait",
                  "seed 003 'Return makes a new claim'"),
        Invariant("cancelled_after_containment", "CANCELLED only once the broker job, agent jobs "
                  "(a LOST one too: its runtime was asked to stop it), service attempts and "
                  "pending consents of the Run are contained",
                  "seed 000 'Cancellation, mutation, and recovery'"),
        Invariant("late_job_fenced", "a hop job that lands after its Run's cancellation "
                  "began is sent an exact abort, by its publisher or, if that boot died first, "
                  "by the next startup before its workers run: it is never left to the broker",
                  "seed 000 'Cancellation, mutation, and recovery'"),
        Invariant("no_live_job_after_terminal", "after heal no terminal Run has a queued hop "
                  "job, nor an active one taken by a boot still alive",
                  "seed 000 'Cancellation, mutation, and recovery'"),
        Invariant("hardware_budget", "at most 8 hardware convergence calls per Run and 3 in a row "
                  "for one capability", "seed 003 'Three boundaries'"),
        Invariant("terminal_evidence_once", "after heal every terminal Run has exactly one "
                  "terminal Step", "seed 000 'Events, settlement, and waits'"),
        Invariant("terminal_step_is_last", "a Run's terminal Step closes its Step log: no "
                  "Step lands after it, not even a late one of a hop fenced out meanwhile "
                  "(a zombie's)", "seed 000 'Events, settlement, and waits'; issue 18 item 2"),
        Invariant("terminal_step_at_most_once", "at every committed write no Run has more "
                  "than one terminal Step, whoever wrote it (hop, canceller, relay, startup)",
                  "seed 000 'Events, settlement, and waits'"),
        Invariant("prepark_binds_run", "startup parks a hop of an earlier boot on a consent, "
                  "agent job or service attempt only when the first resumable snapshot of its "
                  "checkpoint binds that same Run and exactly that owner",
                  "seed 000 'Events, settlement, and waits', 'Cancellation, mutation, and "
                  "recovery'"),
        Invariant("reread_repairs_evidence", "a cancel that re-reads an already CANCELLED Run "
                  "returns only once the Run's terminal Step exists, unless a fault struck "
                  "that very call", "seed 000 'Cancellation, mutation, and recovery'"),
        Invariant("subscriber_order", "every subscriber sees a Run's events in cursor order, "
                  "gaps only at an explicit resync (whose next event follows its cursor "
                  "at once: one after the terminal event sits just before it), and at "
                  "most one terminal event",
                  "seed 000 'Events, settlement, and waits'"),
        Invariant("fenced_before_rotation", "a delivery is rotated only once the broker job of "
                  "its old sequence is finished or absent", "seed 000 'Cancellation, mutation, "
                  "and recovery'"),
        Invariant("cleanup_never_blocks", "a failed checkpoint deletion never aborts a boot's "
                  "startup: cleanup is best-effort debt, retried while the Vessel serves",
                  "seed 000 'Events, settlement, and waits' (cleanup cannot conceal terminal "
                  "truth); 'Cancellation, mutation, and recovery'"),
        Invariant("checkpoint_released", "after heal no terminal Run still holds a checkpoint: "
                  "the cleanup debt is paid", "seed 000 'Cancellation, mutation, and recovery' "
                  "(startup retries idempotent checkpoint deletion)"),
        Invariant("delivery_never_reopens", "a delivery is born HELD or PENDING and only moves "
                  "forward; a SETTLED or FAILED delivery never changes state again",
                  "seed 000 'Admission and exact claim'"),
        Invariant("held_released_by_hook", "a HELD delivery is released to PENDING only after "
                  "the caller's retention hook completed", "seed 000 'Admission and exact claim'"),
        Invariant("published_has_job", "a delivery is marked PUBLISHED only while the broker "
                  "holds a job of exactly its hop key", "seed 000 'Admission and exact claim'"),
        Invariant("fresh_key_new_job", "a publisher publishes only the Run's current "
                  "generation: once a fresh sequence exists, the superseded hop key is never "
                  "published again",
                  "seed 000 'Cancellation, mutation, and recovery'"),
        Invariant("publish_open_hop", "a publisher issues a broker job only for a hop it "
                  "read PENDING (or PUBLISHED: a relay republishing a lost job), never for "
                  "one it saw HELD, CLAIMED or closed",
                  "seed 000 'Admission and exact claim' (publish exactly one PENDING hop)"),
        Invariant("transient_never_fails_a_run", "a transient storage error (a blip shorter "
                  "than the retry bound) never ends a Run FAILED: the hop retries it, for its "
                  "effect may already have happened", "seed 000 'Cancellation, mutation, and "
                  "recovery' (FAILED claims containment); issue M11"),
        Invariant("stale_hop_inert", "a late redelivery of a finished hop's old key (its Run's "
                  "sequence moved on, or its delivery closed) is refused by the exact claim and "
                  "has no effect: no committed write, Step, publish or external effect",
                  "seed 000 'Admission and exact claim'"),
        Invariant("cancel_completes", "a cancel that meets no live job or child to wait for, "
                  "and no fault of a child's runtime on its own path, completes: it does not "
                  "answer CANCELLING (a lost abort acknowledgement is re-probed, a ledger blip "
                  "retried; an acknowledgement is seen within a poll)",
                  "seed 000 'Cancellation, mutation, and recovery'"),
        Invariant("cancel_answers", "an operator's cancel answers with the Run (CANCELLED, "
                  "CANCELLING, or the terminal state that won) or with unavailability (the "
                  "process, the ledger or the broker out of reach); a child that refuses "
                  "its cancel leaves an honest CANCELLING, never an error",
                  "seed 000 'Cancellation, mutation, and recovery' (anything short of "
                  "containment leaves a retryable CANCELLING)"),
        Invariant("cancel_fences_parent", "a cancel that answers CANCELLING has fenced the "
                  "parent: the Run's hop job is finished, absent or sent its abort (ABORTING), "
                  "unless it landed behind the cancellation (late_job_fenced then holds)",
                  "seed 000 'Cancellation, mutation, and recovery' (the writer fences the "
                  "broker's parent job first)"),
        Invariant("liveness", "after heal every admitted Run is terminal, or waits on a service "
                  "attempt left INDETERMINATE for want of proof: nothing QUEUED, RUNNING or "
                  "CANCELLING remains", "DESIGN section 6"),
        # Leased jobs: seed 004_85033eb8fc772f12.txt.
        Invariant("fence_never_overwritten", "a result stages only under the job's current "
                  "fence: a late result from an old fence never overwrites a newer "
                  "interpretation, and staged interpretations are never retracted",
                  "seed 004 'Leases and fences'"),
        Invariant("job_budgets", "at most 3 worker attempts and 2 model calls per "
                  "interpretation, also across crashes; every model call is reserved before it "
                  "goes out, by the holder of the live lease",
                  "seed 004 'Bounded retries', 'Alpha.2 accounting'"),
        Invariant("evidence_kept", "every received evidence stays, unchanged, with its job",
                  "seed 004 'Durable states', 'Leases and fences'"),
        Invariant("usage_never_fabricated", "the attempt log records only usage the model "
                  "returned for that call, labelled with that call's interpretation (unknown "
                  "usage is None, never zero), and keeps the usage a live worker received "
                  "even when its result was fenced out",
                  "seed 004 'Alpha.2 accounting'"),
        Invariant("job_liveness", "after heal every job is terminal or waiting on a named "
                  "dependency", "seed 004 'Durable states'"),
        # Service attempts: seed 000_81a5c720b14d934a.txt, "Service job attempts".
        Invariant("service_no_fabricated_failure", "after a submit an attempt is FAILED only on "
                  "proof (a proved rejection with no provider job, or the provider's own "
                  "failure), SUCCEEDED only on the provider's success, and terminal is final",
                  "seed 000 'Service job attempts'"),
        Invariant("service_single_effect", "at most one provider effect per idempotency "
                  "identity, and each transmission after the first rests on proof of no effect "
                  "or same-key replay", "seed 000 'Service job attempts'"),
        Invariant("service_key_payload", "a changed payload for a key is refused and never "
                  "reaches the provider; the same payload (in any key order) and a fresh "
                  "attempt are never refused",
                  "seed 000 'Service job attempts'"),
        Invariant("service_cancel_contained", "CANCELLED only while the provider runs nothing "
                  "of the attempt", "seed 000 'Service job attempts'"),
        Invariant("service_liveness", "after heal every attempt is terminal, or INDETERMINATE "
                  "with nothing left at the provider and its containment evidence recorded",
                  "seed 000 'Service job attempts'"),
    )
}

INVARIANTS.update(
    (name, Invariant(name, rule, source))
    for name, rule, source in (*OUTCOME_INVARIANTS, CRASH_WINDOW_INVARIANT,
                               *STARTUP_INVARIANTS, *RETRY_INVARIANTS, *MUTATION_INVARIANTS,
                               *HOP_INVARIANTS, *BOOT_INVARIANTS,
                               *ADMISSION_INVARIANTS, *STASIS_INVARIANTS, *PAGE_INVARIANTS,
                               *JOB_INVARIANTS, *EVENT_INVARIANTS, *WRITER_INVARIANTS,
                               *DEBT_INVARIANTS, *RELAY_INVARIANTS,
                               *ack_checks.INVARIANTS, *rotation_checks.INVARIANTS,
                               *token_checks.INVARIANTS, *input_checks.INVARIANTS)
)


@dataclass(frozen=True)
class Violation:
    invariant: str
    message: str
    records: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"invariant": self.invariant, "message": self.message, "records": self.records}


class _Stop(Exception):
    """Unwinds a check after its first violation; never leaves the checker."""


def _brief(record: Run | RunDelivery | None) -> dict[str, Any] | None:
    if record is None:
        return None
    if isinstance(record, Run):
        return {"run": str(record.id), "status": record.status.value, "seq": record.seq,
                "started_at": record.started_at.isoformat() if record.started_at else None}
    return {"run": str(record.run_id), "seq": record.seq, "state": record.state.value,
            "boot": record.claimed_boot}


def _seen(table: dict[Any, Any], copy: dict[Any, Any], read: TrackedTable[Any, Any] | None,
          changed: Collection[Any], gone: Collection[Any]) -> TrackedTable[Any, Any] | None:
    """Bring the checker's `copy` of `table` up to it; return the TrackedTable it now
    mirrors, or None when the caller must copy the table whole (a plain dict)."""
    if not isinstance(table, TrackedTable):
        return None
    if table is read:
        for key in changed:
            copy[key] = table[key]
        for key in gone:
            copy.pop(key, None)
    else:  # first read of this table: copy it whole, in place
        copy.clear()
        copy.update(table)
    table.settle()
    return table


class Checker:
    def __init__(self, world: World) -> None:
        self.world = world
        self.runs: dict[UUID, Run] = {}
        self.deliveries: dict[tuple[UUID, int], RunDelivery] = {}
        self._read_r: TrackedTable[UUID, Run] | None = None
        self._read_d: TrackedTable[tuple[UUID, int], RunDelivery] | None = None
        """The TrackedTables `runs` and `deliveries` are copies of, as of their last
        `settle()` (None: the tables are plain dicts, or not read yet)."""
        self.violations: list[Violation] = []
        self.transactions = 0
        self.late_jobs: dict[str, tuple[int, int]] = {}
        self.job_finished_at: dict[str, float] = {}
        """Virtual time at which each hop job was first seen finished through a boot."""
        """Hop jobs that landed behind their Run's cancellation: key -> (boot, trace index)."""
        self.job_checks = JobChecks(self)
        self.event_checks = EventChecks(self)
        self.writer_checks = WriterChecks(self)
        self.relay_checks = RelayChecks(self)
        self.debt_checks = DebtChecks(self)
        self.terminal_steps: dict[UUID, tuple[int, int]] = {}
        """Per Run: Steps already scanned and terminal Steps among them."""
        self.service_checks = ServiceChecks(self)
        self.outcome_checks = OutcomeChecks(self)
        self.window_checks = WindowChecks(self)
        self.startup_checks = StartupChecks(self)
        self.page_checks = PageChecks(self)
        self.retry_checks = RetryChecks(self)
        self.mutation_checks = MutationChecks(self)
        self.hop_checks = HopChecks(self)
        self.boot_checks = BootChecks(self)
        self.admission_checks = AdmissionChecks(self)
        self.stasis_checks = StasisChecks(self)
        self.app_invariants: dict[str, Invariant] = {}
        """Invariants of an application under test (harness.api), besides INVARIANTS."""
        self.app_checks: list[Callable[[bool], None]] = []
        """An application's checks: called after every committed write (False) and once
        at the end (True); each reports through `fail` or `report`."""
        self._seqs: dict[UUID, set[int]] = {}
        """Per Run: the sequences of its delivery rows (kept in step with the ledger)."""
        self._sessions: dict[str, set[UUID]] = {}
        """Per Bridge session: its nonterminal Runs (kept in step with the ledger)."""
        self._by_status: dict[RunStatus, dict[UUID, Run]] = {}
        """`runs` by status, kept in step with it by the writes' diffs (`_reindex`)."""

    def fail(self, invariant: str, message: str, **records: Any) -> None:
        self.report(invariant, message, **records)
        raise _Stop

    def report(self, invariant: str, message: str, **records: Any) -> None:
        """Record a violation and stop the world, without unwinding the caller (for an
        assertion in application code, which must not see the checker's exception)."""
        assert invariant in INVARIANTS or invariant in self.app_invariants, invariant
        violation = Violation(invariant, message, records)
        if not self.violations:
            self.world.trace.emit("checker", "violation", invariant=invariant, message=message)
            self.world.request_stop()
        self.violations.append(violation)

    def _app_checks(self, final: bool) -> None:
        for check in self.app_checks:
            check(final)

    # -- after every committed write ------------------------------------------

    def after_transaction(self, name: str) -> None:
        if self.violations:
            return
        with contextlib.suppress(_Stop):
            self._after_transaction()
            self.debt_checks.after_write()
            self.event_checks.after_write()
            if name in ("append_step", "append_steps", "settle_run"):  # settle_run: issue 17
                self._check_terminal_steps()
            self._app_checks(False)

    def _after_transaction(self) -> None:
        self.transactions += 1
        changes = self._diff()
        changed_d, _, changed_r, _ = changes
        for key in changed_d:
            self._delivery_changed(self.deliveries.get(key), self.world.ledger.delivery_table[key])
        for rid in changed_r:
            self._run_changed(self.runs.get(rid), self.world.ledger.run_table[rid])
        self._structure_after_write(*changes)

    def _diff(self) -> tuple[list[tuple[UUID, int]], Collection[tuple[UUID, int]],
                             list[UUID], Collection[UUID]]:
        """Delivery and Run rows added or changed, and removed, since the last write.

        Tables that are TrackedTables (the world's, sim/tracked.py) and that this
        checker has read before are read only at the keys written since; any other
        table is scanned whole. Both give the same rows in the same order."""
        deliveries, runs = self.world.ledger.delivery_table, self.world.ledger.run_table
        changed_d, gone_d = self._table_diff(deliveries, self.deliveries, self._read_d)
        changed_r, gone_r = self._table_diff(runs, self.runs, self._read_r)
        return changed_d, gone_d, changed_r, gone_r

    @staticmethod
    def _table_diff(table: dict[Any, Any], before: dict[Any, Any],
                    read: dict[Any, Any] | None) -> tuple[list[Any], Collection[Any]]:
        if isinstance(table, TrackedTable) and table is read:
            dirty = table.dirty
            changed = table.in_order(
                k for k in dirty if k in table and before.get(k) is not table[k])
            return changed, {k for k in dirty if k in before and k not in table}
        changed = [key for key, row in table.items() if before.get(key) is not row]
        gone = before.keys() - table.keys() if len(before) + len(changed) > len(table) else ()
        return changed, gone

    def _structure_after_write(
        self,
        changed_d: list[tuple[UUID, int]],
        gone_d: Collection[tuple[UUID, int]],
        changed_r: list[UUID],
        gone_r: Collection[UUID],
    ) -> None:
        """The structural invariants over the Runs this write touched; then this
        write's records become the ones the next write is compared with."""
        touched = self._reindex(changed_d, gone_d, changed_r, gone_r)
        ledger = self.world.ledger
        self._read_r = _seen(ledger.run_table, self.runs, self._read_r, changed_r, gone_r)
        self._read_d = _seen(
            ledger.delivery_table, self.deliveries, self._read_d, changed_d, gone_d)
        if self._read_r is None:
            self.runs = dict(ledger.run_table)
        if self._read_d is None:
            self.deliveries = dict(ledger.delivery_table)
        if touched:
            self._check_structure(touched)

    def _reindex(
        self,
        changed_d: list[tuple[UUID, int]],
        gone_d: Collection[tuple[UUID, int]],
        changed_r: list[UUID],
        gone_r: Collection[UUID],
    ) -> set[UUID]:
        """Bring the sequence and session indexes up to this write; return the Runs
        whose rows it touched (added, changed or removed, Run or delivery)."""
        touched: set[UUID] = set()
        for rid, seq in changed_d:
            self._seqs.setdefault(rid, set()).add(seq)
            touched.add(rid)
        for rid, seq in gone_d:
            self._seqs.get(rid, set()).discard(seq)
            touched.add(rid)
        by_status = self._by_status
        for rid in itertools.chain(changed_r, gone_r):
            touched.add(rid)
            prev = self.runs.get(rid)
            if prev is not None:
                by_status.get(prev.status, {}).pop(rid, None)
                if prev.session is not None:
                    self._sessions.get(prev.session, set()).discard(rid)
        runs = self.world.ledger.run_table
        for rid in changed_r:
            run = runs[rid]
            by_status.setdefault(run.status, {})[rid] = run
            if run.session is not None and not run.status.terminal:
                self._sessions.setdefault(run.session, set()).add(rid)
        return touched

    def runs_in(self, status: RunStatus) -> dict[UUID, Run] | None:
        """The ledger's Runs in `status` by id, read from the index of the checker's
        copy of the Run table; None when that copy may differ from the table (a write
        since the last transaction's diff, a table replaced or never read: scan it)."""
        read = self._read_r
        if read is None or self.world.ledger.run_table is not read or read.dirty:
            return None
        return self._by_status.get(status, {})

    def _run_changed(self, prev: Run | None, run: Run) -> None:
        if prev is None:
            self.admission_checks.scope_names_caller(run)
            return
        self.window_checks.run_changed(run)
        if prev.status.terminal and prev != run:
            self.fail("terminal_is_final", f"terminal Run {run.id} changed",
                      before=_brief(prev), after=_brief(run))
        if prev.started_at is not None and run.started_at != prev.started_at:
            self.fail("started_at_stable", f"Run {run.id} started_at moved",
                      before=_brief(prev), after=_brief(run))
        if run.status.terminal and not prev.status.terminal:
            self._check_settlement(prev, run)
            self._check_failure_cause(run)
        if run.status is RunStatus.FAILED and prev.status is not RunStatus.FAILED:
            self.outcome_checks.run_failed(prev, run)
            self.stasis_checks.run_failed(run)
        if run.status is RunStatus.DONE and prev.status is not RunStatus.DONE:
            self.outcome_checks.run_done(run)
            self.stasis_checks.run_done(run)
        if run.status is RunStatus.QUEUED and prev.status is not RunStatus.QUEUED and \
                prev.status not in OWNER_WAITS:
            self.fail("no_replay_after_death", f"Run {run.id} went {prev.status.value} -> QUEUED",
                      before=_brief(prev), after=_brief(run))
        if run.status is RunStatus.CANCELLED and prev.status is not RunStatus.CANCELLED:
            self._check_containment(run)
        if run.status in OWNER_WAITS and prev.status not in OWNER_WAITS:
            self._check_park_binding(run)

    def _check_park_binding(self, run: Run) -> None:
        """prepark_binds_run: the checkpoint a startup park rests on names this Run and
        its owner. Only a park of a hop claimed by an earlier boot reads the stored
        document; the live hop parks on the checkpoint it holds in memory (a stored
        copy gone wrong is then found by the resumed hop)."""
        d = self.world.ledger.delivery_table.get((run.id, run.seq))
        boots = self.world.boots
        if d is None or not boots or d.claimed_boot in (None, boots[-1].id):
            return
        record = self.world.ledger.checkpoint_table.get(run.id)
        snap = None
        if record is not None:
            with contextlib.suppress(ValidationError):
                snap = Checkpoint.model_validate(record.document).first_resumable()
        owner = {
            RunStatus.AWAITING_CONSENT: ("consent", run.consent_id,
                                         snap.consent_id if snap else None),
            RunStatus.AWAITING_DELEGATE: ("agent job", run.agent_job_id,
                                          snap.agent_job_id if snap else None),
            RunStatus.AWAITING_SERVICE: ("service attempt", run.service_attempt_id,
                                         snap.service_attempt_id if snap else None),
        }[run.status]
        what, parked_on, bound = owner
        if snap is None or snap.run_id != run.id or bound != parked_on:
            names = "no resumable snapshot" if snap is None else (
                f"a snapshot of Run {snap.run_id} bound to {what} {bound}")
            self.fail("prepark_binds_run", f"Run {run.id} parked {run.status.value} on {what} "
                      f"{parked_on} over {names}", run=_brief(run))

    def on_cancel_left_cancelling(self, run_id: UUID, since: int, began: float,
                                  struck: tuple[str, ...] = ()) -> None:
        """cancel_completes, once an operator's cancel answered CANCELLING; `struck`
        lists the faults fired on that call's own path (sim.faults.struck)."""
        self._guarded(lambda: self._parent_fenced(run_id))
        self._guarded(lambda: self._cancel_left_cancelling(run_id, since, began, struck))

    def on_cancel_refused(self, run_id: UUID, error: BaseException) -> None:
        """cancel_answers, once an operator's cancel raised `error`."""
        if isinstance(error, CANCEL_UNAVAILABLE):
            return
        self._guarded(lambda: self.fail(
            "cancel_answers", f"a cancel of Run {run_id} raised {error!r} instead of "
            "answering", run=_brief(self.world.ledger.run_table.get(run_id))))

    def _parent_fenced(self, run_id: UUID) -> None:
        run = self.world.ledger.run_table.get(run_id)
        if run is None or run.status is not RunStatus.CANCELLING:
            return
        d = self.world.ledger.delivery_table.get((run.id, run.seq))
        job = self.world.broker.jobs.get(d.key) if d is not None else None
        if d is None or job is None or d.key in self.late_jobs:
            return
        status = job.info.status
        if status.finished or status is JobStatus.ABORTING:
            return
        self.fail("cancel_fences_parent", f"a cancel of Run {run.id} answered CANCELLING and "
                  f"left its hop job {d.key} {status.value}, never sent an abort",
                  run=_brief(run), delivery=_brief(d))

    def on_job_finished(self, key: str) -> None:
        self.job_finished_at.setdefault(key, anyio.current_time())

    def _cancel_left_cancelling(self, run_id: UUID, since: int, began: float,
                                struck: tuple[str, ...]) -> None:
        if any(_may_stall_a_cancel(fault) for fault in struck):
            return  # a child refused, or the call was held: CANCELLING is its honest answer
        if any(any(mark in line for mark in _WORLD_FAULTS)
               for line in self.world.trace.lines[since:]):
            return  # a crash, stall, partition or outage strikes every call of a boot
        ledger = self.world.ledger
        run = ledger.run_table.get(run_id)
        if run is None or run.status is not RunStatus.CANCELLING:
            return
        d = ledger.delivery_table.get((run.id, run.seq))
        job = self.world.broker.jobs.get(d.key) if d is not None else None
        waited = anyio.current_time() - began >= CANCEL_ACK_TIMEOUT_S - 1e-6
        if d is not None and job is not None and not job.info.status.finished:
            if waited or d.key in self.late_jobs:
                return  # it waited out the acknowledgement, or the job landed behind it
            self.fail("cancel_completes", f"a cancel of Run {run.id} answered CANCELLING "
                      f"without waiting for its hop job {d.key} to acknowledge the abort",
                      run=_brief(run))
        if waited and not self._acked_early(run_id, anyio.current_time()):
            return  # the acknowledgement came only as the cancel gave up
        if self.world.agents.live_jobs_of(run.id) or any(
                a.owner.run_id == run.id and not a.state.terminal
                for a in self.world.services.attempt_table.values()):
            return
        self.fail("cancel_completes", f"a cancel of Run {run.id} answered CANCELLING with its "
                  "job finished, its children contained and no fault of a child during the "
                  "call", run=_brief(run))

    def _acked_early(self, run_id: UUID, now: float) -> bool:
        """Whether the Run's hop job finished (acknowledged its abort) well before the
        cancel gave up: a cancel polling every ACK_POLL_S would have seen it."""
        run = self.world.ledger.run_table.get(run_id)
        if run is None:
            return False
        d = self.world.ledger.delivery_table.get((run.id, run.seq))
        finished = self.job_finished_at.get(d.key) if d is not None else None
        return finished is not None and now - finished > CANCEL_ACK_POLL_S + 1.0

    def on_cancel_reread(self, run_id: UUID, since: int) -> None:
        """reread_repairs_evidence, once a re-read cancel returned CANCELLED; `since` is
        the trace length when the call began (a fault after it excuses a missing Step)."""
        if self.violations:
            return
        if any(any(mark in line for mark in _EVIDENCE_FAULTS)
               for line in self.world.trace.lines[since:]):
            return
        steps = self.world.ledger.step_log.get(run_id, [])
        if not any(s.kind in TERMINAL_STEP_KINDS for s in steps):
            with contextlib.suppress(_Stop):
                run = self.world.ledger.run_table.get(run_id)
                self.fail("reread_repairs_evidence", f"Run {run_id} re-read CANCELLED without "
                          "its terminal Step", run=_brief(run))

    def _check_failure_cause(self, run: Run) -> None:
        # Only the injected blips say this: outages end within max_outage_s, well
        # inside runtime.retry.RETRY_BUDGET_S, so a correct hop outlasts them.
        if run.status is RunStatus.FAILED and "LedgerUnavailable" in (run.error or ""):
            self.fail("transient_never_fails_a_run", f"Run {run.id} FAILED by a transient "
                      f"storage error: {run.error}", run=_brief(run))

    def _check_containment(self, run: Run) -> None:
        d = self.world.ledger.delivery_table.get((run.id, run.seq))
        job = self.world.broker.jobs.get(d.key) if d else None
        # A job that landed after CANCELLING committed came from a publish still in
        # flight, after the canceller's probe: late_job_fenced holds its publisher to it.
        if job is not None and job.info.status.live and d is not None \
                and d.key not in self.late_jobs:
            self.fail("cancelled_after_containment", f"Run {run.id} CANCELLED while its broker "
                      f"job is {job.info.status.value}", run=_brief(run))
        live = self.world.agents.live_jobs_of(run.id)
        if live:
            self.fail("cancelled_after_containment", f"Run {run.id} CANCELLED while agent job "
                      f"{live[0]} still runs", run=_brief(run))
        lost = self.world.agents.lost_jobs_of(run.id)
        if lost:
            self.fail("cancelled_after_containment", f"Run {run.id} CANCELLED while agent job "
                      f"{lost[0]} is LOST and its runtime was never asked to stop it",
                      run=_brief(run))
        open_ = [a for a in self.world.services.attempt_table.values()
                 if a.owner.run_id == run.id and not a.state.terminal]
        if open_:
            self.fail("cancelled_after_containment", f"Run {run.id} CANCELLED while service "
                      f"attempt {open_[0].id} is {open_[0].state.value}", run=_brief(run))
        pending = [c for c in self.world.ledger.consent_table.values()
                   if c.run_id == run.id and c.status.value == "PENDING"]
        if pending:
            self.fail("cancelled_after_containment", f"Run {run.id} CANCELLED with consent "
                      f"{pending[0].id} pending", run=_brief(run))

    def _check_settlement(self, prev: Run, run: Run) -> None:
        d = self.world.ledger.delivery_table.get((run.id, run.seq))
        if run.seq != prev.seq or d is None:
            self.fail("settlement_fenced", f"Run {run.id} settled off its current sequence",
                      before=_brief(prev), after=_brief(run), delivery=_brief(d))
            return
        if run.status is RunStatus.CANCELLED:
            if prev.status is not RunStatus.CANCELLING:
                self.fail("settlement_fenced", f"Run {run.id} CANCELLED without CANCELLING first",
                          before=_brief(prev), after=_brief(run))
            return
        if d.state is DeliveryState.SETTLED:
            before = self.deliveries.get((run.id, run.seq))
            claimed = before is not None and before.state is DeliveryState.CLAIMED
            settleable = (RunStatus.RUNNING, RunStatus.AWAITING_HARDWARE)
            if prev.status not in settleable or not claimed:
                self.fail("settlement_fenced", f"Run {run.id} settled without its claim",
                          before=_brief(prev), after=_brief(run), delivery=_brief(before))

    def _delivery_changed(self, prev: RunDelivery | None, d: RunDelivery) -> None:
        self.boot_checks.delivery_changed(prev, d)
        delivery_checks.delivery_moves_forward(self, prev, d)
        delivery_checks.published_has_job(self, prev, d)
        delivery_checks.held_released_by_hook(self, prev, d)
        self.admission_checks.held_names_owner(d)
        if (
            d.state is DeliveryState.FAILED
            and prev is not None
            and prev.state in (DeliveryState.PENDING, DeliveryState.PUBLISHED)
            and (d.run_id, d.seq + 1) in self.world.ledger.delivery_table
        ):
            job = self.world.broker.jobs.get(d.key)
            if job is not None and job.info.status.live:
                self.fail("fenced_before_rotation", f"delivery {d.key} rotated while its job is "
                          f"{job.info.status.value}", delivery=_brief(d))
        if d.state is not DeliveryState.CLAIMED:
            return
        if prev is not None and prev.state is DeliveryState.CLAIMED:
            if prev.claim_token != d.claim_token:
                self.fail("claim_is_exact", f"delivery {d.key} claimed twice",
                          before=_brief(prev), after=_brief(d))
            return
        run_before = self.runs.get(d.run_id)
        if d.mode.value == "resume" and run_before is not None:
            self._check_resume(run_before)
        ok = (
            prev is not None
            and prev.state in (DeliveryState.PENDING, DeliveryState.PUBLISHED)
            and run_before is not None
            and run_before.status is RunStatus.QUEUED
            and run_before.seq == d.seq
        )
        if not ok:
            self.fail("claim_is_exact", f"delivery {d.key} claimed outside its exact window",
                      delivery_before=_brief(prev), run_before=_brief(run_before))

    def _check_structure(self, touched: Collection[UUID] | None = None) -> None:
        """single_claim, sequences_gap_free and session_fence over the Runs in
        `touched`, or over the whole ledger when None. After every write only the
        Runs whose Run or delivery rows that write added, changed or removed are
        checked: each of the three rules reads only one Run's rows (its deliveries,
        its sequence, the nonterminal Runs of its session), so a Run no write
        touched keeps the verdict it had after the previous write."""
        if touched is None:
            self._index_all()
            runs = self.world.ledger.run_table
            touched = [*runs, *(rid for rid in self._seqs if rid not in runs)]
        ledger = self.world.ledger
        for rid in touched:
            seqs = self._seqs.get(rid, ())
            n = sum(1 for seq in seqs
                    if ledger.delivery_table[(rid, seq)].state is DeliveryState.CLAIMED)
            if n > 1:
                self.fail("single_claim", f"Run {rid} has {n} CLAIMED deliveries", run=str(rid))
        for rid in touched:
            run = ledger.run_table.get(rid)
            if run is None:
                continue
            have = sorted(self._seqs.get(rid, ()))
            if have != list(range(run.seq + 1)):
                self.fail("sequences_gap_free", f"Run {rid} has sequences {have}",
                          run=_brief(run))
            if run.session is not None and not run.status.terminal:
                others = sorted(self._sessions.get(run.session, set()) - {rid})
                if others:
                    self.fail("session_fence", f"session {run.session} has two nonterminal Runs",
                              runs=[str(others[0]), str(rid)])

    def _index_all(self) -> None:
        """Rebuild the sequence and session indexes from the whole ledger."""
        self._seqs, self._sessions = {}, {}
        for rid, seq in self.world.ledger.delivery_table:
            self._seqs.setdefault(rid, set()).add(seq)
        for rid, run in self.world.ledger.run_table.items():
            if run.session is not None and not run.status.terminal:
                self._sessions.setdefault(run.session, set()).add(rid)

    def _check_terminal_steps(self) -> None:
        """terminal_step_at_most_once, incrementally: only Steps appended since the
        last check are read (a restored, shorter log is read again from the start)."""
        for rid, log in self.world.ledger.step_log.items():
            seen, n = self.terminal_steps.get(rid, (0, 0))
            if len(log) == seen:
                continue
            if len(log) < seen:
                seen, n = 0, 0
            closed = n > 0  # a terminal Step was already among the Steps scanned
            new = log[seen:]
            n += sum(1 for s in new if s.kind in TERMINAL_STEP_KINDS)
            self.terminal_steps[rid] = (len(log), n)
            if n > 1:
                run = self.world.ledger.run_table.get(rid)
                kinds = [s.kind for s in log if s.kind in TERMINAL_STEP_KINDS]
                self.fail("terminal_step_at_most_once", f"Run {rid} has {n} terminal Steps "
                          f"({', '.join(kinds)})", run=_brief(run))
            first = next((i for i, s in enumerate(new) if s.kind in TERMINAL_STEP_KINDS), None)
            after = new if closed else new[first + 1:] if first is not None else []
            if after:  # (a second terminal Step is terminal_step_at_most_once's, above)
                run = self.world.ledger.run_table.get(rid)
                self.fail("terminal_step_is_last", f"Run {rid} took Step {after[0].kind} "
                          f"(hop {after[0].seq}) after its terminal Step", run=_brief(run))

    def _check_resume(self, run: Run) -> None:
        ledger = self.world.ledger
        if run.consent_id is not None and run.agent_job_id is None:
            consent = ledger.consent_table.get(run.consent_id)
            if consent is None or consent.run_id != run.id or not consent.status.decided:
                self.fail("resume_reads_decided_owner", f"Run {run.id} resumed on consent "
                          f"{run.consent_id} that is not decided", run=_brief(run))
        if run.agent_job_id is not None:
            job = ledger.agent_job_table.get(run.agent_job_id)
            if job is None or job.run_id != run.id or not job.status.terminal:
                self.fail("resume_reads_decided_owner", f"Run {run.id} resumed on agent job "
                          f"{run.agent_job_id} that is not terminal", run=_brief(run))
        if run.service_attempt_id is not None:
            attempt = self.world.services.attempt_table.get(run.service_attempt_id)
            if attempt is None or attempt.owner.run_id != run.id or not attempt.state.terminal:
                self.fail("resume_reads_decided_owner", f"Run {run.id} resumed on service "
                          f"attempt {run.service_attempt_id} that is not terminal",
                          run=_brief(run))

    def on_job_landed(self, key: str, run_id: UUID, seq: int, boot: int) -> None:
        """A publish created hop job `key`: note it when its Run's cancellation began."""
        run = self.world.ledger.run_table.get(run_id)
        cancelling = (RunStatus.CANCELLING, RunStatus.CANCELLED)
        if run is not None and run.status in cancelling and run.seq == seq:
            self.late_jobs[key] = (boot, len(self.world.trace.lines))

    def on_converge(self, run_id: UUID, calls: list[str]) -> None:
        try:
            run_length = 1
            for a, b in itertools.pairwise(calls):
                run_length = run_length + 1 if a == b else 1
            if len(calls) > 8 or run_length > 3:
                self.fail("hardware_budget", f"Run {run_id} made {len(calls)} convergence calls "
                          f"({run_length} in a row for {calls[-1]})", calls=calls)
        except _Stop:
            pass

    # -- leased jobs and service attempts -----------------------------------------

    def _guarded(self, check: Callable[[], None]) -> None:
        if self.violations:
            return
        with contextlib.suppress(_Stop):
            check()

    def after_job_write(self, name: str) -> None:
        self.transactions += 1
        self._guarded(self.job_checks.after_write)

    def after_service_write(self, name: str) -> None:
        self.transactions += 1
        self._guarded(self.service_checks.after_write)

    def on_model_call(self, key: CallKey, record: ModelCall, worker: str,
                      version: str | None = None) -> None:
        """A model call goes out from `worker`'s client of model `version`."""
        self._guarded(lambda: self.job_checks.on_model_call(key, record, worker, version))

    def on_subscribe(self, name: str, after: int, found: Before, sub: Subscription | None,
                     error: BaseException | None) -> None:
        self._guarded(lambda: self.event_checks.on_subscribe(name, after, found, sub, error))

    def on_unread(self, name: str, sub: Subscription, channel: RunChannel) -> None:
        self._guarded(lambda: self.event_checks.on_unread(name, sub, channel))

    def on_step_append(self, caller: FrameType | None) -> None:
        self._guarded(lambda: self.event_checks.on_step_append(caller))

    def on_step_started(self, caller: FrameType | None, boot_id: str) -> StepWriter | None:
        """A Step append of boot `boot_id` begins; the writer making it (linger_holds)."""
        return self.writer_checks.append_started(caller, boot_id)

    def on_step_ended(self, writer: StepWriter) -> None:
        self.writer_checks.append_ended(writer)

    def on_evidence_point(self, caller: FrameType | None, boot_id: str) -> None:
        """A hop reached settle.evidence_written (terminal_flush_before_cleanup)."""
        self._guarded(lambda: self.writer_checks.on_evidence_point(caller, boot_id))

    def on_settle_started(self, caller: FrameType | None, args: tuple[Any, ...],
                          kwargs: dict[str, Any]) -> None:
        """A settle_run attempt begins (settle_folds_steps)."""
        self._guarded(lambda: self.writer_checks.settle_started(caller, args, kwargs))

    def on_stream_end(self, name: str, sub: Subscription, channel: RunChannel,
                      slow: bool) -> None:
        self._guarded(lambda: self.event_checks.on_stream_end(name, sub, channel, slow))

    def on_service_settle(self, found: ServiceJobAttempt | None, outcome: ServiceOutcome,
                          evidence: Evidence, error: BaseException | None) -> None:
        self._guarded(lambda: self.service_checks.on_settle(found, outcome, evidence, error))

    def on_service_resubmit(self, found: ServiceJobAttempt | None, proof: Evidence,
                            result: ServiceJobAttempt | None,
                            error: BaseException | None) -> None:
        self._guarded(lambda: self.service_checks.on_resubmit(found, proof, result, error))

    def on_service_indeterminate(self, found: ServiceJobAttempt | None, evidence: Evidence,
                                 result: ServiceJobAttempt | None,
                                 error: BaseException | None) -> None:
        self._guarded(lambda: self.service_checks.on_indeterminate(found, evidence, result,
                                                                   error))

    def on_service_running(self, found: ServiceJobAttempt | None, cursor: str | None,
                           result: ServiceJobAttempt | None,
                           error: BaseException | None) -> None:
        self._guarded(lambda: self.service_checks.on_running(found, cursor, result, error))

    def on_job_decision(self, name: str, args: tuple[Any, ...], found: LeasedJob | None,
                        result: Any, error: BaseException | None) -> None:
        self._guarded(lambda: self.job_checks.on_decision(name, args, found, result, error))

    def on_retry_call(self, args: tuple[Any, ...], current: LeasedJob | None) -> None:
        """A `schedule_retry` call reaches the job store seam, before any fault."""
        self._guarded(lambda: self.job_checks.on_retry_call(args, current))

    def on_provider_transmission(self, key: str, digest: str) -> None:
        self._guarded(lambda: self.service_checks.on_provider_transmission(key, digest))

    def on_provider_effect(self, key: str) -> None:
        self._guarded(lambda: self.service_checks.on_provider_effect(key))

    def on_open_pass(self, process: str, open_before: Collection[UUID],
                     visited: Sequence[UUID]) -> None:
        """A `reconcile_open` pass of `process` completed: the attempts open as it began,
        and those it returned, in order."""
        self._guarded(lambda: self.service_checks.on_open_pass(process, open_before, visited))

    # -- startup ----------------------------------------------------------------

    def on_startup_failed(self, boot: int, cleanup: bool) -> None:
        """A boot's startup raised; `cleanup`: a checkpoint deletion failure caused it."""
        if cleanup:
            self._guarded(lambda: self.fail(
                "cleanup_never_blocks", f"boot {boot} aborted startup because a checkpoint "
                "could not be deleted", boot=boot))

    def on_start_unrecorded(self, boot: int, key: str) -> None:
        """Boot `boot` was shown hop job `key` active without a start time."""
        self.startup_checks.on_start_unrecorded(boot, key)

    def on_delivery_drift(self, boot: int, key: str) -> None:
        """Boot `boot` read the delivery row of `key` out of step with its QUEUED Run."""
        self.startup_checks.on_delivery_drift(boot, key)

    def on_abort(self, boot: int, key: str) -> None:
        """As boot `boot` sends an abort for hop job `key` (before it applies)."""
        self._guarded(lambda: self.startup_checks.on_abort(boot, key))
        if self.world.leased:
            self._guarded(lambda: self.boot_checks.on_abort(boot, key))

    def on_swept(self, boot: int, key: str) -> None:
        """Boot `boot`'s broker sweep has just ended hop job `key` as aborted."""
        self._guarded(lambda: self.startup_checks.on_swept(boot, key))

    def on_reconcile_started(self, boot: int) -> None:
        """Boot `boot`'s reconciliation begins (past its reconcile.started point)."""
        self.page_checks.on_reconcile_started(boot)
        self.startup_checks.on_reconcile_started(boot)

    def on_startup_done(self, boot: int, degraded: bool, visited: Collection[UUID] = (),
                        cleanup_owed: Collection[UUID] = ()) -> None:
        """Boot `boot` reconciled and serves; `degraded` is what its report said,
        `visited` the Runs its report names (CANCELLING, orphans, deliveries) and
        `cleanup_owed` the terminal Runs whose checkpoint it reports still owed."""
        self._guarded(lambda: self.startup_checks.on_startup_done(boot, degraded))
        self._guarded(lambda: self.page_checks.on_startup_done(boot, visited, cleanup_owed))

    def on_startup_report(self, boot: int, deliveries: Mapping[str, Collection[UUID]],
                          refired: Collection[UUID] = ()) -> None:
        """Boot `boot`'s reconciliation reported these delivery verdicts and these
        refired Runs (it serves next, or the strict profile refuses)."""
        self._guarded(lambda: self.startup_checks.on_report(boot, deliveries, refired))

    def on_readmit(self, boot: int, run_id: UUID) -> None:
        """Boot `boot`'s readmit_after_* of `run_id` committed and was answered."""
        self.startup_checks.on_readmit(boot, run_id)

    def on_delivery_read(self, delivery: RunDelivery | None) -> None:
        """The current task read this delivery row (`Ledger.get_delivery`, as it saw it)."""
        self._guarded(lambda: ack_checks.on_delivery_read(self, delivery))

    def on_probe(self, boot: int, key: str, info: JobInfo | None = None,
                 started: bool = False) -> None:
        """The current task begins (`started`) or ends a broker probe of `key`."""
        if started:
            self._guarded(lambda: ack_checks.on_probe_started(self))
        else:
            self._guarded(lambda: ack_checks.on_probed(self, boot, key, info))

    def on_page(self, boot: int, statuses: Sequence[RunStatus], page: list[Run],
                cursor: tuple[datetime, UUID] | None = None) -> None:
        """Boot `boot`'s ledger seam returns a page of Runs (`Ledger.page_runs`) read
        after `cursor`."""
        self._guarded(lambda: self.page_checks.on_page(boot, statuses, page, cursor))
        self.startup_checks.on_page(boot, statuses)

    def on_claim(self, boot_id: str, delivery: RunDelivery | None) -> None:
        """As a claim commits (before the claimant hears of it)."""
        key = delivery.key if delivery is not None else "?"
        if delivery is not None:
            self.writer_checks.on_claim(boot_id, delivery.run_id, delivery.seq)
        self._guarded(lambda: self.mutation_checks.claim_committed(boot_id, key))
        if self.world.leased:
            self._guarded(lambda: self.boot_checks.on_claim(boot_id))

    def on_settled(self, boot: Boot, run: object) -> None:
        """Boot `boot`'s settle_run committed, answering `run` (chatty_tokens_spell_result)."""
        self._guarded(lambda: token_checks.on_settled(self, boot, run))

    def on_lease_written(self, boot: Boot, now: datetime, renewed: bool | None) -> None:
        """Boot `boot`'s register_boot (renewed None) or renew_boot returned (its answer)."""
        self.boot_checks.lease_written(boot, now, renewed)

    def on_renewal_asked(self, boot: Boot) -> None:
        """Boot `boot` calls renew_boot (before the call reaches the ledger)."""
        self.boot_checks.renewal_asked(boot)

    def on_hop_write(self, boot: Boot, name: str, args: tuple[Any, ...]) -> None:
        """Boot `boot`'s ledger write `name` changed something (fenced_holder_inert)."""
        self._guarded(lambda: self.boot_checks.on_write(boot, name, args))

    def on_publish(self, key: str, run_id: UUID, seq: int,
                   caller: FrameType | None = None) -> None:
        """As a publisher issues a broker publish (before it lands); `caller` is the
        frame that called the broker (read, never changed)."""
        self._guarded(lambda: delivery_checks.publish_names_current_generation(
            self, key, run_id, seq))
        self._guarded(lambda: delivery_checks.publish_open_hop(self, key, caller))

    def on_crash_point(self, point: str, boot: int, context: dict[str, Any]) -> None:
        """A crash fired at catalogued `point` (in boot or process `boot`), the point's
        own context (the Run, consent, job or attempt it names) given."""
        if not self.violations:
            self.window_checks.on_crash(point, boot, context)

    def on_stale_hop_write(self, key: str, what: str, result: object) -> None:
        """The stale redelivery of hop `key` made ledger write `what` (or a publish or
        an effect): only its refused claim is allowed."""
        if what == "claim_delivery" and not getattr(result, "claimed", True):
            return
        self._guarded(lambda: self.fail(
            "stale_hop_inert", f"a stale redelivery of {key} made {what}", key=key))

    def on_stale_hop_done(self, key: str, outcome: object) -> None:
        if outcome != "skipped":
            self._guarded(lambda: self.fail(
                "stale_hop_inert", f"a stale redelivery of {key} ran a hop ({outcome})", key=key))

    # -- effects ----------------------------------------------------------------

    def on_effect(self, identity: str, run_id: UUID, seq: int) -> None:
        with contextlib.suppress(_Stop):
            self._on_effect(identity, run_id, seq)

    def _on_effect(self, identity: str, run_id: UUID, seq: int) -> None:
        run = self.world.ledger.run_table.get(run_id)
        d = self.world.ledger.delivery_table.get((run_id, seq))
        holds = (
            run is not None and run.status is RunStatus.RUNNING and run.seq == seq
            and d is not None and d.state is DeliveryState.CLAIMED
        )
        if not holds:
            self.fail("effect_under_claim", f"effect {identity} by hop {seq} without the claim",
                      run=_brief(run), delivery=_brief(d))

    # -- once the world is quiescent ----------------------------------------------

    def final(self, check_liveness: bool) -> None:
        if self.violations:
            return
        try:
            self._after_transaction()
            self._check_broker()
            self._check_late_jobs()
            self._check_effects()
            self.retry_checks.final()
            self._check_admissions()
            self._check_subscribers()
            self.admission_checks.final()
            self.stasis_checks.final()
            if self.world.leased:
                self.boot_checks.final()
            if check_liveness:
                rotation_checks.final(self)  # before liveness: it names why the Run waits
                self.relay_checks.final()  # so does a relay its supervisor left dead
                self._check_liveness()
                self._check_evidence()
                self._check_cleanup()
                self._check_no_live_job_after_terminal()
                self.window_checks.final()
            self.job_checks.final(check_liveness)
            self.service_checks.final(check_liveness)
            input_checks.final(self)
            self._app_checks(True)
        except _Stop:
            pass

    def _check_broker(self) -> None:
        runs = self.world.ledger.run_table
        published: Counter[str] = Counter()
        for rec in self.world.trace.records("job.published"):
            if rec["event"] == "job.published":
                published[rec["data"]["key"]] += 1
        for key, n in sorted(published.items()):
            if n > 1:
                self.fail("hop_key_identity", f"hop key {key} published {n} times", key=key)
        for key, job in sorted(self.world.broker.jobs.items()):
            run_id, seq = parse_hop_key(key)
            if job.info.run_id != run_id or job.info.seq != seq:
                self.fail("hop_key_identity", f"job {key} carries other work",
                          job_run=str(job.info.run_id), job_seq=job.info.seq)
            run = runs.get(run_id)
            if run is not None and job.info.priority != 100 - run.priority:
                self.fail("broker_priority", f"job {key} priority {job.info.priority} for "
                          f"doctrine priority {run.priority}", key=key)

    def _check_late_jobs(self) -> None:
        """Every late job was sent an abort after it landed."""
        if not self.late_jobs:
            return
        aborted: set[str] = set()
        for index, rec in self.world.trace.indexed("job.abort"):
            if rec["event"] == "job.abort":
                landed = self.late_jobs.get(rec["data"]["key"])
                if landed is not None and index >= landed[1]:
                    aborted.add(rec["data"]["key"])
        taken = self._taken_before_publisher_died()
        for key, (boot, _) in sorted(self.late_jobs.items()):
            if key not in aborted and key not in taken:
                job = self.world.broker.jobs.get(key)
                self.fail("late_job_fenced", f"hop job {key} landed behind its Run's "
                          "cancellation and was never aborted", key=key, boot=boot,
                          job=job.info.status.value if job else None)

    def _taken_before_publisher_died(self) -> set[str]:
        """Late jobs a worker of the landing boot took before that boot crashed: its
        publisher died before it could fence, and the next startup's re-fence leaves a
        started job to the claim CAS (which refuses it) and the sweep, by design
        (runtime.publish_fence.refence_cancelled). A boot that stopped gracefully is
        not excused: its publisher was alive to fence."""
        taken: set[str] = set()
        dequeued: set[str] = set()
        for index, rec in self.world.trace.indexed("job.dequeued", "boot.crash"):
            key = rec["data"].get("key")
            landed = self.late_jobs.get(key) if key is not None else None
            if rec["event"] == "job.dequeued" and landed is not None and index >= landed[1]:
                dequeued.add(key)
            elif rec["event"] == "boot.crash":
                crashed = rec["data"]["boot"]
                taken |= {k for k in dequeued if self.late_jobs[k][0] == crashed}
        return taken

    def _check_no_live_job_after_terminal(self) -> None:
        live_boot = self.world.live_boot
        taken_by: dict[str, int | None] = {}
        alive = {live_boot.number} if live_boot is not None else set()
        if self.world.leased:  # boots overlap: the trace's boot is the newest, not the taker
            taken_by.update(self.world.taken_by)
            alive = {b.number for b in self.world.alive_boots()}
        else:
            for rec in self.world.trace.records("job.dequeued"):
                if rec["event"] == "job.dequeued":
                    taken_by[rec["data"]["key"]] = rec["boot"]
        runs = self.world.ledger.run_table
        for key, job in sorted(self.world.broker.jobs.items()):
            run = runs.get(job.info.run_id)
            if run is None or not run.status.terminal:
                continue
            status = job.info.status
            by_live = taken_by.get(key) in alive
            if status is JobStatus.QUEUED or (status is JobStatus.ACTIVE and by_live):
                self.fail("no_live_job_after_terminal", f"Run {run.id} is {run.status.value} "
                          f"but its hop job {key} is still {status.value}", run=_brief(run))

    def _check_effects(self) -> None:
        applied = Counter(c.identity for c in self.world.effects.calls if c.applied)
        for identity, n in sorted(applied.items()):
            if n > 1:
                self.fail("effect_at_most_once", f"effect {identity} applied {n} times")

    def _check_admissions(self) -> None:
        by_key: dict[str, set[str]] = {}
        for rec in self.world.trace.records("submit.result"):
            if rec["event"] != "submit.result":
                continue
            data = rec["data"]
            run = self.world.ledger.run_table.get(UUID(data["run_id"])) if data.get("run_id") \
                else None
            key = data.get("key")
            if data["outcome"] == "admitted" and run is not None:
                if run.fingerprint != data["fingerprint"]:
                    self.fail("idempotent_admission", f"key {key} returned Run {run.id} for other "
                              "content", key=key)
                if key is not None:
                    by_key.setdefault(key, set()).add(str(run.id))
            if data["outcome"] == "IdempotencyConflict" and run is not None \
                    and run.fingerprint == data["fingerprint"]:
                self.fail("idempotent_admission", f"key {key} refused its own content", key=key)
        for key, ids in sorted(by_key.items()):
            if len(ids) > 1:
                self.fail("idempotent_admission", f"key {key} admitted {len(ids)} Runs", key=key)
        scoped: Counter[tuple[str, str]] = Counter(
            (r.idempotency_scope, r.idempotency_key)
            for r in self.world.ledger.run_table.values()
            if r.idempotency_scope is not None and r.idempotency_key is not None)
        for (scope, key), n in sorted(scoped.items()):
            if n > 1:
                self.fail("idempotent_admission", f"key {key} of {scope} holds {n} Runs", key=key)
        delivery_checks.replay_matches_content(self)

    def _check_evidence(self) -> None:
        terminal = {"run.done", "run.failed", "run.cancelled"}
        for rid, run in sorted(self.world.ledger.run_table.items(), key=lambda kv: str(kv[0])):
            if not run.status.terminal:
                continue
            n = sum(1 for s in self.world.ledger.step_log.get(rid, []) if s.kind in terminal)
            if n != 1:
                self.fail("terminal_evidence_once", f"Run {rid} ({run.status.value}) has {n} "
                          "terminal Steps", run=_brief(run))

    def _check_cleanup(self) -> None:
        ledger = self.world.ledger
        for rid in sorted(ledger.checkpoint_table, key=str):
            run = ledger.run_table.get(rid)
            if run is not None and run.status.terminal:
                self.fail("checkpoint_released", f"Run {rid} ({run.status.value}) still holds "
                          "its checkpoint after heal", run=_brief(run))

    def _check_subscribers(self) -> None:
        streams: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
        for rec in self.world.trace.records("sub.event"):
            if rec["event"] == "sub.event":
                d = rec["data"]
                streams.setdefault((d["sub"], d["run"], rec["boot"]), []).append(d)
        for (sub, run, boot), events in sorted(streams.items()):
            last, terminals, resync_next = 0, 0, False
            for e in events:
                if terminals:
                    self.fail("subscriber_order", f"{sub} saw {e['kind']} after the terminal "
                              f"event of Run {run}", boot=boot)
                if e["kind"] == "resync":
                    resync_next = True
                    last = e["cursor"]
                    continue
                # A boundary replaces everything up to its cursor (the gap is before it),
                # so the event after it comes at exactly its cursor + 1; only the first
                # event of a stream may start anywhere (its subscribe cursor is untraced).
                gap = e["cursor"] != last + 1 and (last != 0 or resync_next)
                if e["cursor"] <= last or gap:
                    self.fail("subscriber_order", f"{sub} saw cursor {e['cursor']} after {last} "
                              f"on Run {run}", boot=boot)
                resync_next = False
                last = e["cursor"]
                terminals += e["kind"] in ("run.done", "run.failed", "run.cancelled")

    def _check_liveness(self) -> None:
        for run in sorted(self.world.ledger.run_table.values(), key=lambda r: (r.created_at, r.id)):
            if not run.status.terminal and not self._waits_without_proof(run):
                d = self.world.ledger.delivery_table.get((run.id, run.seq))
                job = self.world.broker.jobs.get(d.key) if d else None
                self.fail("liveness", f"Run {run.id} is still {run.status.value} after heal",
                          run=_brief(run), delivery=_brief(d),
                          job=job.info.status.value if job else None)


    def _waits_without_proof(self, run: Run) -> bool:
        return waits_without_proof(self.world, run)


def waits_without_proof(world: World, run: Run) -> bool:
    """AWAITING_SERVICE on an INDETERMINATE attempt: honest until the provider
    proves something (service_liveness holds the attempt to its own rules)."""
    if run.status is not RunStatus.AWAITING_SERVICE or run.service_attempt_id is None:
        return False
    attempt = world.services.attempt_table.get(run.service_attempt_id)
    return attempt is not None and attempt.state is ServiceState.INDETERMINATE


STATIC_CHECKS: dict[str, tuple[str, ...]] = {
    "_check_structure": ("single_claim", "sequences_gap_free", "session_fence"),
    "_check_broker": ("broker_priority", "hop_key_identity"),
    "_check_evidence": ("terminal_evidence_once",),
    "_check_liveness": ("liveness",),
}
"""The invariants that need no history: they run over any ledger at rest,
including a PostgreSQL ledger after a real restart (restart receipts)."""


class _StaticWorld:
    """Just enough of a World for the history-free checks over a ledger dump."""

    def __init__(self, dump: Any, jobs: dict[str, dict[str, Any]]) -> None:
        from types import SimpleNamespace

        from runtime.adapters.memory import MemoryLedger
        from runtime.seams import JobInfo, JobStatus

        self.ledger = MemoryLedger()
        self.ledger.run_table = {r.id: r for r in dump.runs}
        self.ledger.delivery_table = {(d.run_id, d.seq): d for d in dump.deliveries}
        for step in dump.steps:
            self.ledger.step_log.setdefault(step.run_id, []).append(step)
        self.ledger.consent_table = {c.id: c for c in dump.consents}
        self.ledger.agent_job_table = {j.id: j for j in dump.agent_jobs}
        self.services = self.ledger.services  # a dump holds no attempts: none are read
        infos = {}
        for key, job in sorted(jobs.items()):
            run_id, seq = parse_hop_key(key)
            info = JobInfo(key=key, queue="", status=JobStatus(job["status"]),
                           priority=int(job["priority"]), run_id=run_id, seq=seq)
            infos[key] = SimpleNamespace(info=info)
        self.broker = SimpleNamespace(jobs=infos)
        self.effects = SimpleNamespace(calls=[])
        self.agents = SimpleNamespace(live_jobs_of=lambda run_id: [],
                                      lost_jobs_of=lambda run_id: [])
        self.trace = SimpleNamespace(emit=lambda *a, **k: None, records=lambda *events: iter(()),
                                     indexed=lambda *events: iter(()))

    def request_stop(self) -> None:
        return None


def check_static(dump: Any, jobs: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Every history-free invariant over a ledger dump and broker jobs, each with its result."""
    world = _StaticWorld(dump, jobs)
    results = []
    for method, names in STATIC_CHECKS.items():
        checker = Checker(world)  # type: ignore[arg-type]
        with contextlib.suppress(_Stop):
            getattr(checker, method)()
        failed = {v.invariant: v.message for v in checker.violations}
        for name in names:
            results.append({"invariant": name, "rule": INVARIANTS[name].rule,
                            "held": name not in failed, "message": failed.get(name, "")})
    return results
