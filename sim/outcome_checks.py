"""Invariants on why a Run failed: every FAILED Run names a cause the world produced.

Mutation testing (`make mutation`, issue M9) showed runtime changes that turn
good Runs into FAILED ones, with no other invariant noticing: a failure is a
legal terminal state, so a worker that fails every hop as "pinned Pattern
unavailable", or a node whose TypeError the hop catches and settles as the
Run's failure, passed every campaign. These checks read only durable records
(the ledger's Run, its claimed delivery) and the world's own books (its
registry, its boots), like the rest of the checker.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from uuid import UUID

from pydantic import ValidationError

from runtime import faults
from runtime.adapters.memory.broker import SWEPT
from runtime.faults import CATALOGUE
from runtime.graph.snapshots import Checkpoint
from runtime.jobs.models import EventKind as JobEventKind
from runtime.keys import hop_key
from runtime.models import DeliveryState, Run, RunDelivery, RunStatus
from runtime.recovery.deliveries import STRANDED
from runtime.recovery.orphans import ABANDONED, LOST
from runtime.seams import JobStatus
from runtime.service.models import ServiceState
from runtime.worker import PINNED_PATTERN_UNAVAILABLE

if TYPE_CHECKING:
    from sim.checker import Checker

PROGRAMMING_ERRORS = (
    "AttributeError", "TypeError", "NameError", "UnboundLocalError", "KeyError", "IndexError",
    "AssertionError", "ZeroDivisionError", "RecursionError", "NotImplementedError",
)
"""Exceptions no simulated actor or fault raises: in a Run's error they are a runtime bug."""

_PROGRAMMING = re.compile(r"\b(" + "|".join(PROGRAMMING_ERRORS) + r")\b[:(]")

UNPINNED_FAILURES = frozenset({PINNED_PATTERN_UNAVAILABLE, LOST, ABANDONED, STRANDED})
"""How a Run whose pinned Pattern version is not registered may fail: the worker's
verdict, or recovery's before any hop of it verified the pin."""

LOSABLE = (RunStatus.RUNNING, RunStatus.AWAITING_HARDWARE)
"""What startup may fail as lost (seed 000 'Cancellation, mutation, and recovery')."""

TERMINAL_STEP_OF = {RunStatus.DONE: "run.done", RunStatus.FAILED: "run.failed",
                    RunStatus.CANCELLED: "run.cancelled"}

EFFECTS_OF_PATTERN = {"two_step": ("deliver",), "effectful": ("effect",)}
"""The effect names each effectful Pattern of runtime/patterns applies before it ends."""

RELEASED_VERSIONS = {name: 1 for name in (
    "echo", "two_step", "chatty", "effectful", "consent_gate", "delegate", "service_call",
    "errands", "hardware")}
"""The checker's copy of the version at which this release ships each of its Patterns
(README "The HTTP API"). A Run stored under a released version must still find it after
an upgrade, so a Pattern's declared version is a contract, not a constant to tune."""

OUTCOME_INVARIANTS = (
    ("done_on_released_pin", "a Run of a shipped Pattern that ends DONE was pinned to "
     "and ran the version this release ships (every one at version 1): a declared "
     "version that moved would strand the Runs an earlier release pinned",
     "seed 000 'Admission and exact claim' (admission pins the Pattern version; the "
     "worker verifies the pinned Pattern); seed 003 'Return makes a new claim'"),
    ("failure_has_cause", "a Run fails only for a cause the world produced: never for a "
     "programming error in the runtime, never as a lost claim (the settling hop holds it), "
     "and never as 'pinned Pattern unavailable' while the registry holds its pinned Pattern",
     "seed 000 'Admission and exact claim'"),
    ("unregistered_pin_fails", "a Run pinned to a Pattern version the serving registry "
     "lacks (admitted by a newer release in a rolling upgrade) is never DONE, and fails only "
     "as 'pinned Pattern unavailable' (or as lost, abandoned or stranded before any hop "
     "verified it): no hop runs another version of its Pattern",
     "seed 000 'Admission and exact claim' (the worker verifies the pinned Pattern); "
     "seed 003 'Return makes a new claim' (pinned-manifest mismatch)"),
    ("done_after_effect", "a Run of a Pattern that performs an external effect is DONE only "
     "once that effect's identity was applied", "DESIGN section 6"),
    ("lost_only_after_death", "a Run is failed as lost only from RUNNING or AWAITING_HARDWARE, "
     "and only when the boot that held its claim is no longer the live boot",
     "seed 000 'Cancellation, mutation, and recovery'"),
    ("lost_after_containment", "a Run failed as lost or abandoned keeps no correlated child "
     "that may act: no PENDING consent, no running agent job, no open service attempt",
     "seed 000 'Cancellation, mutation, and recovery' (otherwise correlated effects are "
     "contained before terminal failure)"),
    ("abandoned_only_after_sweep", "a Run is failed as abandoned in the live boot only "
     "from RUNNING or AWAITING_HARDWARE under that boot's claim, once a sweep aborted its "
     "exact hop job (or the job is gone); never after a fence or abort by the live boot, "
     "never for a hop that failed out of its job",
     "seed 000 'Admission and exact claim' (heartbeat and sweep), "
     "'Cancellation, mutation, and recovery'"),
)


class OutcomeChecks:
    """Called by the Checker on each Run transition into FAILED or DONE."""

    def __init__(self, checker: Checker) -> None:
        self.checker = checker

    def run_failed(self, prev: Run, run: Run) -> None:
        error = run.error or ""
        world = self.checker.world
        found = _PROGRAMMING.search(error)
        if found:
            self.checker.fail("failure_has_cause", f"Run {run.id} failed on a runtime "
                              f"{found.group(1)}: {error[:160]}", run=str(run.id))
        # Settlement is fenced by the claim, so the hop that fails a Run holds it:
        # a settled failure that says the claim was lost contradicts itself.
        if error.startswith("ClaimLost"):
            self.checker.fail("failure_has_cause", f"Run {run.id} was settled FAILED by a hop "
                              f"that says it lost its claim: {error[:160]}", run=str(run.id))
        if error == PINNED_PATTERN_UNAVAILABLE and \
                world.registry.pinned(run.pattern, run.pattern_version) is not None:
            self.checker.fail("failure_has_cause", f"Run {run.id} failed as '{error}' but "
                              f"{run.pattern}@{run.pattern_version} is registered",
                              run=str(run.id))
        if world.registry.pinned(run.pattern, run.pattern_version) is None \
                and error not in UNPINNED_FAILURES:
            self._unpinned(run, f"failed with {error[:160]!r}")
        if error == LOST:
            self._check_lost(prev, run)
        if error == ABANDONED:
            self._check_abandoned(prev, run)
        if error in (LOST, ABANDONED):
            self._check_children_contained(run)

    def _unpinned(self, run: Run, what: str) -> None:
        self.checker.fail("unregistered_pin_fails", f"Run {run.id} pinned to "
                          f"{run.pattern}@{run.pattern_version}, which no serving registry "
                          f"holds, {what}", run=str(run.id))

    def _check_children_contained(self, run: Run) -> None:
        world = self.checker.world
        pending = [c.id for c in world.ledger.consent_table.values()
                   if c.run_id == run.id and c.status.value == "PENDING"]
        live = world.agents.live_jobs_of(run.id)
        open_ = [a.id for a in world.services.attempt_table.values()
                 if a.owner.run_id == run.id and not a.state.terminal]
        for what, ids in (("consent", pending), ("agent job", live), ("service attempt", open_)):
            if ids:
                self.checker.fail("lost_after_containment", f"Run {run.id} failed as "
                                  f"{run.error} while its {what} {ids[0]} is uncontained",
                                  run=str(run.id))

    def _check_lost(self, prev: Run, run: Run) -> None:
        if prev.status not in LOSABLE:
            self.checker.fail("lost_only_after_death", f"Run {run.id} failed as lost from "
                              f"{prev.status.value}", run=str(run.id))
        d = self.checker.deliveries.get((run.id, run.seq))
        live = self.checker.world.live_boot
        holder = d.claimed_boot if d is not None else None
        # Boots overlap in a leased world: sim.boot_checks judges the holder by its lease.
        if live is not None and holder == live.id and not self.checker.world.leased:
            self.checker.fail("lost_only_after_death", f"Run {run.id} failed as lost while its "
                              f"claim is held by the live {holder}", run=str(run.id))

    def _check_abandoned(self, prev: Run, run: Run) -> None:
        d = self.checker.deliveries.get((run.id, run.seq))
        world = self.checker.world
        live = world.writer if world.leased else world.live_boot  # the boot that fails it
        if prev.status not in LOSABLE or d is None or live is None \
                or d.claimed_boot != live.id:
            self.checker.fail("abandoned_only_after_sweep", f"Run {run.id} failed as "
                              f"abandoned from {prev.status.value} under the claim of "
                              f"{d.claimed_boot if d else None}", run=str(run.id))
            return
        job = self.checker.world.broker.jobs.get(d.key)
        if job is None:
            return
        info = job.info
        # Boots overlap in a leased world: another boot's fence of this boot's job (it
        # judged the job a dead boot's while this one was stalled or cut off) is, to
        # this boot, what a sweep is: its hop is gone, aborted under its claim.
        by = world.aborted_by.get(d.key) if world.leased else None
        foreign = by is not None and live is not None and by != live.number
        if info.status is not JobStatus.ABORTED or (info.error != SWEPT and not foreign):
            self.checker.fail("abandoned_only_after_sweep", f"Run {run.id} failed as "
                              f"abandoned while its job {d.key} is {info.status.value} "
                              f"({info.error})", run=str(run.id))

    def run_done(self, run: Run) -> None:
        if self.checker.world.registry.pinned(run.pattern, run.pattern_version) is None:
            self._unpinned(run, "is DONE")
        released = RELEASED_VERSIONS.get(run.pattern)
        if released is not None and run.pattern_version != released:
            self.checker.fail("done_on_released_pin", f"Run {run.id} is DONE pinned to "
                              f"{run.pattern}@{run.pattern_version}; this release ships "
                              f"{run.pattern}@{released}", run=str(run.id))
        applied = {c.identity for c in self.checker.world.effects.calls if c.applied}
        for name in EFFECTS_OF_PATTERN.get(run.pattern, ()):
            identity = f"{run.id}:{name}"
            if identity not in applied:
                self.checker.fail("done_after_effect", f"Run {run.id} ({run.pattern}) is DONE "
                                  f"but its effect {identity} was never applied", run=str(run.id))


# -- the designed outcome of each crash window (DESIGN section 5) -------------------

CRASH_WINDOW_INVARIANT = (
    "crash_window_outcome", "a crash at a catalogued fault point ends in that window's designed "
    "outcome (runtime.faults.CATALOGUE): parked, re-fired, failed as lost, republished under "
    "the same key, cancelled only by an operator's cancellation, never merely 'something legal'",
    "DESIGN section 5; seed 000 'Cancellation, mutation, and recovery'; seed 003 'Return makes "
    "a new claim'; seed 004 'Leases and fences'")


@dataclass
class WindowHit:
    """One crash that fired at a catalogued point: what the world held at that moment."""

    point: str
    boot: int
    run: Run | None
    """The Run the point names (as the ledger held it when the crash fired)."""
    delivery: RunDelivery | None
    """The delivery the window concerns (the Run's current one, or the one published)."""
    context: dict[str, Any]
    after: list[Run] = field(default_factory=list)
    """Every committed version of that Run after the crash."""
    events: int = 0
    """For a leased job: how many attempt events it had when its worker crashed."""
    binds: bool = False
    """The stored checkpoint was a pre-park window of this Run, hop and owner."""

    def went(self, *statuses: RunStatus, seq: int | None = None) -> bool:
        return any(r.status in statuses and (seq is None or r.seq == seq) for r in self.after)

    @property
    def cancelled(self) -> bool:
        """An operator's cancellation reached the Run after the crash: every window may end so."""
        return self.went(RunStatus.CANCELLING, RunStatus.CANCELLED)

    @property
    def seq(self) -> int:
        assert self.run is not None
        return self.run.seq


Verdict = str | None
"""None when the window ended as designed, else what it ended in instead."""


def _lost(hit: WindowHit, checker: Checker) -> Verdict:
    """The hop died uncheckpointed: contained and FAILED as lost at that very sequence."""
    if hit.cancelled or any(r.status is RunStatus.FAILED and r.error == LOST
                            and r.seq == hit.seq for r in hit.after):
        return None
    return f"not failed as lost at seq {hit.seq}"


def _lost_and_fenced(hit: WindowHit, checker: Checker) -> Verdict:
    """claim.committed: the pre-boot hop job is fenced too, not left to run."""
    why = _lost(hit, checker)
    if why is not None:
        return why
    key = hop_key(hit.run.id, hit.seq) if hit.run else ""
    job = checker.world.broker.jobs.get(key)
    if job is not None and job.info.status in (JobStatus.QUEUED, JobStatus.ACTIVE):
        return f"its pre-boot hop job {key} is still {job.info.status.value}"
    return None


def _published_same_key(hit: WindowHit, checker: Checker) -> Verdict:
    """Nothing was published yet: the relay publishes exactly this generation's key
    (a HELD one only once its caller's replay released it, else never handed out)."""
    d = hit.delivery
    if d is None or hit.cancelled:
        return None
    if d.key in checker.world.broker.jobs:
        return None
    run = checker.world.ledger.run_table[d.run_id]
    if d.state is DeliveryState.HELD and run.status is not RunStatus.DONE:
        return None  # refused, never handed out (the Run ended without it)
    return f"hop key {d.key} was never published"


def _marked_once(hit: WindowHit, checker: Checker) -> Verdict:
    """The job landed, its acknowledgement was lost: the relay finds it by probe,
    so the delivery leaves PENDING and its key keeps its one job."""
    d = hit.delivery
    if d is None or hit.cancelled:
        return None
    now = checker.world.ledger.delivery_table.get((d.run_id, d.seq))
    if now is not None and now.state is DeliveryState.PENDING:
        return f"delivery {d.key} is still PENDING"
    if d.key not in checker.world.broker.jobs:
        return f"the job of {d.key} it acknowledged is gone"
    return None


def _parked(status: RunStatus, owner: str) -> Callable[[WindowHit, Checker], Verdict]:
    def check(hit: WindowHit, checker: Checker) -> Verdict:
        """Checkpoint and owner row exist: startup parks on exactly that owner; a
        stored snapshot that does not bind this Run and owner is no window (the
        hop failed uncheckpointed: lost)."""
        if hit.cancelled:
            return None
        if not hit.binds:
            return _lost(hit, checker)
        for r in hit.after:
            if r.status is status and r.seq == hit.seq and getattr(r, owner) is not None:
                return None
        return f"never parked {status.value} at seq {hit.seq}"

    check.__doc__ = f"Startup parks {status.value} on the {owner} the checkpoint names."
    return check


def _stored_window_binds(checker: Checker, run: Run) -> bool:
    """Whether the stored checkpoint of `run` is a pre-park window of its current hop:
    its first resumable snapshot names this Run and the owner the record binds."""
    record = checker.world.ledger.checkpoint_table.get(run.id)
    if record is None or record.seq != run.seq:
        return False
    try:
        snap = Checkpoint.model_validate(record.document).first_resumable()
    except ValidationError:
        return False
    return snap is not None and snap.run_id == run.id and (
        snap.consent_id, snap.agent_job_id, snap.service_attempt_id
    ) == (record.consent_id, record.agent_job_id, record.service_attempt_id)


def _resumed(hit: WindowHit, checker: Checker) -> Verdict:
    """A verdict committed (consent.decided): the Run is re-admitted from that consent."""
    consent = checker.world.ledger.consent_table.get(hit.context.get("consent_id"))  # type: ignore[arg-type]
    if consent is None:
        return "the decided consent is gone"
    run = checker.world.ledger.run_table.get(consent.run_id)
    if run is None or run.status in (RunStatus.CANCELLING, RunStatus.CANCELLED) or hit.cancelled:
        return None
    if (consent.run_id, consent.seq + 1) in checker.world.ledger.delivery_table:
        return None
    return f"Run {consent.run_id} was never re-admitted from consent {consent.id}"


def _service_proceeds(hit: WindowHit, checker: Checker) -> Verdict:
    """Parked on a PREPARED attempt: it is sent once and re-admits the Run from its
    proven terminal state, or stays waiting while the attempt is unproven."""
    if hit.cancelled or hit.run is None:
        return None
    world = checker.world
    if (hit.run.id, hit.seq + 1) in world.ledger.delivery_table:
        return None
    run = world.ledger.run_table[hit.run.id]
    attempt = world.services.attempt_table.get(run.service_attempt_id) \
        if run.service_attempt_id else None
    if run.status is RunStatus.AWAITING_SERVICE and attempt is not None \
            and attempt.state is ServiceState.INDETERMINATE:
        return None
    return f"the Run is {run.status.value} at seq {run.seq} and was never re-admitted"


def _truth_stands(hit: WindowHit, checker: Checker) -> Verdict:
    """Terminal status committed: it never changes, and its one terminal Step says it."""
    if hit.run is None:
        return None
    run = checker.world.ledger.run_table[hit.run.id]
    if run.status is not hit.run.status:
        return f"terminal {hit.run.status.value} became {run.status.value}"
    kinds = [s.kind for s in checker.world.ledger.step_log.get(run.id, [])
             if s.kind in TERMINAL_STEP_OF.values()]
    if kinds != [TERMINAL_STEP_OF[run.status]]:
        return f"its terminal Steps are {kinds} for a {run.status.value} Run"
    return None


def _checkpoint_gone(hit: WindowHit, checker: Checker) -> Verdict:
    """Evidence written, checkpoint not yet deleted: cleanup deletes it, never revives."""
    why = _truth_stands(hit, checker)
    if why is not None:
        return why
    if hit.run is not None and hit.run.id in checker.world.ledger.checkpoint_table:
        return "its checkpoint was never deleted"
    return None


def _cancelled(hit: WindowHit, checker: Checker) -> Verdict:
    """CANCELLING committed: startup repeats containment and then CANCELLED."""
    if hit.run is None:
        return None
    run = checker.world.ledger.run_table[hit.run.id]
    if hit.run.status is not RunStatus.CANCELLING or run.status is RunStatus.CANCELLED:
        return None
    return f"still {run.status.value}, never CANCELLED"


def _rebooted(hit: WindowHit, checker: Checker) -> Verdict:
    """A boot died starting or stopping: a later boot reconciles and serves."""
    if any(b.number > hit.boot and b.ready for b in checker.world.boots):
        return None
    return f"no boot after boot {hit.boot} finished its startup"


def _late_result_fenced(hit: WindowHit, checker: Checker) -> Verdict:
    """A leased worker died holding a model reply: nothing stages under its fence."""
    job_id, fence = hit.context.get("job_id"), hit.context.get("fence")
    events = checker.world.jobs.event_log.get(job_id, [])  # type: ignore[arg-type]
    for e in events[hit.events:]:
        if e.fence == fence and e.kind is JobEventKind.COMPLETED and e.refused is None:
            return f"a result staged under the dead worker's fence {fence}"
    return None


def _adopted_by_lookup(hit: WindowHit, checker: Checker) -> Verdict:
    """The provider acknowledged, the ack was not persisted: reconciliation adopts
    that very provider job by lookup, never a second one from a blind resubmit."""
    attempt = checker.world.services.attempt_table.get(hit.context.get("attempt_id"))  # type: ignore[arg-type]
    if attempt is None:
        return "the attempt is gone"
    acked = hit.context.get("provider_job_id")
    if attempt.provider_job_id not in (None, acked):
        return f"it adopted provider job {attempt.provider_job_id}, not the acknowledged {acked}"
    if attempt.state in (ServiceState.PREPARED, ServiceState.SUBMITTING):
        return f"the attempt is still {attempt.state.value}"
    return None


WINDOW_OUTCOMES: dict[str, Callable[[WindowHit, Checker], Verdict]] = {
    faults.ADMIT_COMMITTED: _published_same_key,
    faults.RELEASE_COMMITTED: _published_same_key,
    faults.PUBLISH_SENT_BEFORE_ACK: _marked_once,
    faults.CLAIM_COMMITTED: _lost_and_fenced,
    faults.EFFECT_APPLIED: _lost,
    faults.SETTLE_TERMINAL_COMMITTED: _truth_stands,
    faults.SETTLE_EVIDENCE_WRITTEN: _checkpoint_gone,
    faults.CONSENT_CHECKPOINT_SAVED: _lost,
    faults.CONSENT_ROW_SAVED: _parked(RunStatus.AWAITING_CONSENT, "consent_id"),
    faults.CONSENT_DECIDED: _resumed,
    faults.READMIT_COMMITTED: _published_same_key,
    faults.DELEGATE_CHECKPOINT_SAVED: _lost,
    faults.DELEGATE_SUBMITTED: _parked(RunStatus.AWAITING_DELEGATE, "agent_job_id"),
    faults.SERVICE_CHECKPOINT_SAVED: _lost,
    faults.SERVICE_PARKED: _service_proceeds,
    faults.HARDWARE_AWAITING: _lost,
    faults.CANCEL_CANCELLING_COMMITTED: _cancelled,
    faults.CANCEL_CONTAINED: _cancelled,
    faults.SHUTDOWN_STARTED: _rebooted,
    faults.RECONCILE_STARTED: _rebooted,
    faults.JOB_INFERENCE_RETURNED: _late_result_fenced,
    faults.SERVICE_SUBMITTED_BEFORE_ACK: _adopted_by_lookup,
}
"""Every catalogued fault point and the check of what a crash there must end in
(the `expected` column of runtime.faults.CATALOGUE, read from durable records)."""


class WindowChecks:
    """Notes each crash at a catalogued point; judges its outcome once healed."""

    def __init__(self, checker: Checker) -> None:
        self.checker = checker
        self.hits: list[WindowHit] = []
        self._watched: dict[UUID, list[WindowHit]] = {}

    def on_crash(self, point: str, boot: int, context: dict[str, Any]) -> None:
        if point not in WINDOW_OUTCOMES:
            self.checker.report("crash_window_outcome", f"a crash fired at {point!r}, which has "
                                "no designed outcome in sim.outcome_checks.WINDOW_OUTCOMES")
            return
        world = self.checker.world
        if world.shutting_down:
            return
        run_id = context.get("run_id")
        run = world.ledger.run_table.get(run_id) if isinstance(run_id, UUID) else None
        delivery = None
        if run is not None:
            seq = context.get("seq", run.seq)
            delivery = world.ledger.delivery_table.get((run.id, seq))
        hit = WindowHit(point, boot, run, delivery, dict(context))
        if run is not None:
            hit.binds = _stored_window_binds(self.checker, run)
        if point == faults.JOB_INFERENCE_RETURNED:
            hit.events = len(world.jobs.event_log.get(context.get("job_id"), []))  # type: ignore[arg-type]
        self.hits.append(hit)
        if run is not None:
            self._watched.setdefault(run.id, []).append(hit)

    def run_changed(self, run: Run) -> None:
        for hit in self._watched.get(run.id, ()):
            hit.after.append(run)

    def final(self) -> None:
        for hit in self.hits:
            why = WINDOW_OUTCOMES[hit.point](hit, self.checker)
            if why is not None:
                subject = f"Run {hit.run.id}" if hit.run is not None else \
                    ", ".join(f"{k}={v}" for k, v in sorted(hit.context.items()))
                self.checker.fail("crash_window_outcome", f"crash at {hit.point} (boot "
                                  f"{hit.boot}): {subject} {why}; designed: "
                                  f"{CATALOGUE[hit.point].expected}", point=hit.point)
