"""Test-only fence breaks: prove the checker can fail.

`SIM_BREAK=<name>` in the environment (or `broken(name)` in-process)
patches the simulated world's memory stores or a runtime function so that
one fence stops holding (the run engine's claim, containment and orphan
fences, the publisher's fence of a job landed behind a cancellation; the
leased job's staging fence; the service attempt's proof before a
re-submit). Campaigns, replays, shrinks and the gate must then report a
violation. Never used outside tests.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager, suppress
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import anyio

from runtime import engine as engine_module
from runtime import retry
from runtime import worker as worker_module
from runtime.adapters.memory.gate import enter
from runtime.adapters.memory.jobs_store import MemoryJobStore
from runtime.adapters.memory.ledger import MemoryLedger
from runtime.app import profiles
from runtime.app.lifespan import Lifespan
from runtime.cancel import Canceller
from runtime.engine import RunEngine
from runtime.errors import BrokerUnavailable, ClaimLost
from runtime.events.errors import EventError
from runtime.events.hop import HopEvents
from runtime.events.model import EventKind
from runtime.events.repair import write_or_owe
from runtime.graph.runner import STASIS_LOST, GraphRunner
from runtime.graph.transitions import End, Goto
from runtime.hop import HopContext
from runtime.jobs import rules as job_rules
from runtime.jobs import worker as jobs_worker
from runtime.jobs.models import JobState, LeasedJob, StagedResult
from runtime.keys import hop_key
from runtime.models import (
    Admission,
    CheckpointRecord,
    Claim,
    DeliveryState,
    Run,
    RunDelivery,
    RunStatus,
    Settlement,
    Step,
)
from runtime.publish_fence import LateJob
from runtime.recovery import debts, deliveries, orphans, reconcile
from runtime.recovery.boot_lease import BootLeaseKeeper
from runtime.recovery.deliveries import DeliveryRecovery, DeliveryVerdict
from runtime.recovery.pages import PAGE_SIZE
from runtime.recovery.relay import Relays
from runtime.recovery.scheduler import Cursor, PageReader, PageScheduler, Visit
from runtime.registry import Node, Pattern, WorkflowRegistry
from runtime.seams import Deps, JobInfo, JobStatus, Ledger
from runtime.service import ServiceContext, ServiceJobAttempt
from runtime.service import attempts as service_attempts
from runtime.service.errors import ResubmitRefused
from runtime.service.models import Evidence, EvidenceKind
from runtime.sessions import AdmissionCoordinator
from runtime.worker import ClaimGate, HopOutcome, Worker
from sim.admission_checks import AdmissionChecks
from sim.break_table import BreakTable
from sim.rule_breaks import RULE_BREAKS

ENV = "SIM_BREAK"


async def _unfenced_claim(
    self: MemoryLedger, run_id: UUID, seq: int, boot_id: str, token: str, now: datetime
) -> Claim:
    """The claim CAS without its fence: any nonterminal Run, any sequence."""
    await enter()
    run = self.run_table.get(run_id)
    d = self.delivery_table.get((run_id, seq))
    if run is None or d is None or run.status.terminal:
        return Claim(claimed=False, run=run, delivery=d)
    run = self._put_run(run, status=RunStatus.RUNNING, started_at=run.started_at or now,
                        updated_at=now)
    d = self._put_delivery(d, state=DeliveryState.CLAIMED, claimed_boot=boot_id,
                           claim_token=token, updated_at=now)
    return Claim(claimed=True, run=run, delivery=d)


async def _no_containment(self: Canceller, run: Run) -> bool:
    """Cancellation that claims containment without fencing anything."""
    return True


async def _rotate_without_fence(self: DeliveryRecovery, run: Run) -> DeliveryVerdict:
    """Delivery recovery that rotates a pre-boot active job without fencing it first."""
    deps = self.engine.deps
    delivery = await deps.ledger.get_delivery(run.id, run.seq)
    if delivery is None or delivery.state not in (DeliveryState.PENDING, DeliveryState.PUBLISHED):
        return await BREAKS.unbroken(_rotate_without_fence)(self, run)
    job = await deps.broker.probe(delivery.key)
    if job is None or not self._pre_boot_active(job.status, job.started_at):
        return await BREAKS.unbroken(_rotate_without_fence)(self, run)
    rotated = await deps.ledger.rotate_delivery(run.id, run.seq, deps.clock.now())
    if rotated is not None:
        await self.engine.publish(rotated)
    return DeliveryVerdict.ROTATED


async def _unfenced_stage(
    self: MemoryJobStore,
    job_id: UUID,
    fence: int,
    owner: str,
    model_version: str,
    result: StagedResult,
    now: datetime,
) -> LeasedJob:
    """Staging that ignores a stale fence: a late result from an old fence lands."""
    if fence == self._job(job_id).fence:
        stage = BREAKS.unbroken(_unfenced_stage)
        return await stage(self, job_id, fence, owner, model_version, result, now)
    await enter()
    job = self._job(job_id)
    held = job.model_copy(update={
        "fence": fence, "lease_owner": owner, "settled_fence": None,
        "lease_expires_at": now + timedelta(seconds=job.lease_s),
    })
    events = self.event_log.get(job_id, [])
    decision = job_rules.decide_stage(
        held, fence, owner, model_version, result, now, len(events),
        job_rules.interpretation_of(events, fence, job.interpretation),
    )
    if decision.error is None:  # keep the job's own fence: only the staging is unfenced
        staged = decision.job.model_copy(update={"fence": job.fence})
        decision = replace(decision, job=staged)
    return self._apply(decision)


async def _blind_absent(ctx: ServiceContext, attempt: ServiceJobAttempt) -> ServiceJobAttempt:
    """Reconciliation that re-submits whenever a lookup finds nothing, proof or not."""
    if attempt.cancel_requested_at is not None:
        return await BREAKS.unbroken(_blind_absent)(ctx, attempt)
    assumed = Evidence(kind=EvidenceKind.SAME_KEY_REPLAY, at=ctx.clock.now(),
                       transmission=attempt.transmissions, detail="assumed, not proved")
    try:
        attempt = await ctx.store.begin_resubmit(attempt.id, assumed, ctx.clock.now())
    except ResubmitRefused:
        return attempt
    return await service_attempts._transmit(ctx, attempt)


async def _fatal_release(ledger: Ledger, run_id: UUID) -> bool:
    """Startup's checkpoint cleanup without its guard: one failed deletion aborts startup."""
    await ledger.delete_checkpoint(run_id)
    return True


async def _no_debts(
    self: MemoryLedger, after: tuple[datetime, UUID] | None, limit: int
) -> list[Run]:
    """A ledger that forgets a debt where it arose: startup finds nothing owed."""
    await enter()
    return []


async def _leave_late_job(self: RunEngine, delivery: RunDelivery) -> LateJob:
    """A publisher that, its acknowledgement lost, never fences a job that landed
    behind the Run's cancellation: the late job is left to the broker."""
    return LateJob.NOT_LATE


async def _unfenced_when_cancelled(self: RunEngine, delivery: RunDelivery) -> LateJob:
    """A publisher cancelled between its job's landing and the acknowledgement (a
    graceful shutdown) that goes without the fence: the job that landed behind its
    Run's cancellation is left to the broker. Every other publisher path fences."""
    if sys.exc_info()[0] is anyio.get_cancelled_exc_class():
        return LateJob.NOT_LATE
    return await BREAKS.unbroken(_unfenced_when_cancelled)(self, delivery)


async def _evidence_teed_to_hop(self: Canceller, run: Run) -> None:
    """The canceller's terminal evidence with a hop's Step writer still attached:
    it writes run.cancelled, then tees the terminal event into the hop's writer."""
    await write_or_owe(self.deps, run, self.evidence_debt)
    if self.bus is not None:
        channel = self.bus.get(run.id)
        if channel is not None and not channel.closed:
            with suppress(EventError):
                await channel.publish(EventKind.RUN_CANCELLED, {})
            await self.bus.close(run.id)


async def _reread_without_evidence(self: Canceller, run: Run) -> Run:
    """A re-read of a CANCELLED Run that sweeps and cleans up but leaves its
    missing terminal Step to the relay."""
    await self.contain(run)
    await self._cleanup(run)
    return run


def _window_of_any_run(record: CheckpointRecord, run: Run) -> bool:
    """A pre-park window that checks the hop but not whose Run the snapshot binds."""
    return record.seq == run.seq


async def _misread_pin(self: Worker, run: Run, *args: Any) -> None:
    """The worker verifies the pinned Pattern against the wrong version: every hop
    fails as 'pinned Pattern unavailable' (caught by failure_has_cause)."""
    misread = run.model_copy(update={"pattern_version": run.pattern_version + 1})
    await BREAKS.unbroken(_misread_pin)(self, misread, *args)


async def _every_own_claim_live(engine: RunEngine, delivery: RunDelivery,
                                live_claims: object) -> bool:
    """The relay's orphan pass as it was: every claim of this boot counts as a live
    hop, so a hop whose job a sweep aborted leaves its Run RUNNING or
    AWAITING_HARDWARE for the rest of the boot."""
    return False


def _any_start(started_at: float | None) -> bool:
    """Every start time is trusted: an active row without one counts as pre-boot,
    so startup fences a job it cannot place (caught by live_hop_not_fenced)."""
    return True


def _present_start(started_at: float | None) -> bool:
    """Any start time present is trusted, a zero or infinite one too: startup compares
    it with its cutoff and fences a job it cannot place (caught by live_hop_not_fenced
    when a START_UNRECORDED probe shows 0.0 or inf)."""
    return started_at is not None


async def _mismatch_as_settled(
    self: DeliveryRecovery, run: Run, delivery: RunDelivery | None
) -> DeliveryVerdict:
    """A QUEUED Run whose delivery row does not match it is passed as settled
    elsewhere, a clean verdict (caught by startup_degrades_honestly)."""
    return DeliveryVerdict.CORRUPT if delivery is None else DeliveryVerdict.SETTLED_ELSEWHERE


async def _every_doubt_corrupt(
    self: DeliveryRecovery, run: Run, delivery: RunDelivery | None
) -> DeliveryVerdict:
    """Out-of-step delivery truth always reported as a missing row: the pass still
    degrades, but the report sends the operator after a row that exists (caught by
    delivery_verdict_true)."""
    verdict = await BREAKS.unbroken(_every_doubt_corrupt)(self, run, delivery)
    return DeliveryVerdict.CORRUPT if verdict.degraded else verdict


def _no_terminal_guard(self: MemoryLedger, log: Sequence[Step]) -> Step | None:
    """The ledger without its one-terminal-Step guard: every terminal append lands."""
    return None


async def _two_boots_write_orphan_evidence(
    deps: Deps, run: Run, debt: dict[UUID, int] | None
) -> None:
    """What the two-Vessel soak saw (issue 15, M11): another live boot fails the
    same orphan at the same moment and writes its evidence too, with its own
    process lock and its own read of the durable Steps. Harmless while the
    ledger refuses a second terminal Step; a duplicate without that guard."""
    peer = replace(deps, boot_id=f"{deps.boot_id}-peer")
    async with anyio.create_task_group() as tg:
        tg.start_soon(write_or_owe, deps, run, debt)
        tg.start_soon(write_or_owe, peer, run, debt)


async def _wait_for_sweep(
    self: DeliveryRecovery, run: Run, delivery: RunDelivery, job: JobInfo
) -> DeliveryVerdict:
    """Recovery as it was before issue 15's item 3: a dead boot's dequeued, never
    claimed job is only aborted, and the Run waits for the broker's heartbeat sweep
    to end it (an aborting job is left as it is)."""
    if job.status is JobStatus.ACTIVE:
        with suppress(BrokerUnavailable):
            await self.engine.deps.broker.abort(delivery.key, "fenced: pre-boot generation")
    return DeliveryVerdict.FENCING


UNGUARDED_LEDGER = (MemoryLedger, "_terminal_step", _no_terminal_guard)
"""The ledger guard removed too: a caller-side break of terminal evidence is only
visible while the ledger would otherwise refuse its second Step."""


async def _effect_while_cancelling(self: HopContext, name: str, payload: dict[str, Any]) -> bool:
    """An effect that checks only that the Run still exists, not that this hop
    still holds it: a hop whose Run went CANCELLING after its claim still acts
    (caught by effect_under_claim in cancel_at_claim)."""
    if await self.deps.ledger.get_run(self.run.id) is None:
        raise ClaimLost(self.run.id, self.seq, "missing")
    return await self.deps.effects.apply(self.effect_identity(name), self.run.id, self.seq,
                                         payload)


async def _gate_effect_skipped(self: HopContext, name: str, payload: dict[str, Any]) -> bool:
    """A consent gate that answers its approved round's effect as applied without
    applying it (as a gate reading the verdict backwards would, on the approved
    side): caught by gate_effects_follow_verdicts in consent."""
    if self.run.pattern == "consent_gate":
        return True
    return await BREAKS.unbroken(_gate_effect_skipped)(self, name, payload)


def _errands_past_rounds(self: Pattern, name: str) -> Node:
    """An errands Run that goes round again after its last round (as `rounds > -1` would:
    the graph-group mutant of waits.py's round test), spawning another job and attempt
    until it is cancelled: caught by errands_bounded in cancel_children."""
    node = BREAKS.unbroken(_errands_past_rounds)(self, name)
    if self.name != "errands" or name != "errand_done":
        return node

    async def once_more(ctx: HopContext, state: Any) -> Any:
        outcome = await node.run(ctx, state)
        if isinstance(outcome, tuple) and isinstance(outcome[1], End):
            return outcome[0], Goto("errand_delegate")
        return outcome

    return Node(node.name, once_more)


async def _replay_republishes(self: RunEngine, prior: Run, intent: Any, retain: Any) -> Any:
    """A replayed admission that publishes the delivery it found already claimed (as an
    admission testing `<= PENDING` would: the engine-group mutant of its publish
    test): caught by publish_open_hop in admission_race."""
    submission = await BREAKS.unbroken(_replay_republishes)(self, prior, intent, retain)
    if submission.delivery.state is DeliveryState.CLAIMED:
        await self.publish(submission.delivery)
    return submission


async def _token_dropped(self: HopContext, text: str) -> None:
    """A hop that never streams its token deltas, though its node still reports them
    spoken (the graph-group mutant of `patterns/basic.py` skipping its token loop):
    caught by chatty_tokens_spell_result in runtime_mutation."""


def _chatty_renumbered(self: WorkflowRegistry, pattern: Pattern) -> Pattern:
    """A release that ships `chatty` one version down (as `version=0` would: the
    graph-group mutant of patterns/basic.py): its Runs pin and run chatty@0, and a Run
    an earlier release pinned to chatty@1 would find nothing (caught by
    done_on_released_pin in runtime_mutation)."""
    if pattern.name == "chatty":
        pattern = replace(pattern, version=pattern.version - 1)
    return BREAKS.unbroken(_chatty_renumbered)(self, pattern)


def _errands_stop_early(self: Pattern, name: str) -> Node:
    """An errands Run that ends after its first round whatever it asked for (as a
    lowered default or round count would: the graph-group mutant of ErrandsState's
    default rounds): caught by errands_complete in cancel_children."""
    node = BREAKS.unbroken(_errands_stop_early)(self, name)
    if self.name != "errands" or name != "errand_done":
        return node

    async def stop(ctx: HopContext, state: Any) -> Any:
        outcome = await node.run(ctx, state)
        if isinstance(outcome, tuple) and isinstance(outcome[1], Goto):
            return outcome[0], End(result={"answers": outcome[0].answers})
        return outcome

    return Node(node.name, stop)


async def _resume_refuses_own(self: GraphRunner) -> Any:
    """A resume that refuses the snapshot of its own Run (as `snap.run_id <= run.id`
    would: the graph-group mutant of runner.py's Run id test): every parked Run fails as
    stasis lost once its wait ends (caught by stasis_kept in consent)."""
    loaded = await BREAKS.unbroken(_resume_refuses_own)(self)
    if isinstance(loaded, tuple):
        return Settlement(status=RunStatus.FAILED, error=STASIS_LOST)
    return loaded


def _needs_ignored(output: Any) -> tuple[JobState, dict[str, Any]]:
    """A worker that reads every model output as needing nothing: a reply naming a
    dependency is staged published (the jobs-group mutants of read_bundle's checks
    stage what the model did not say): caught by interpretation_is_reply in leased_jobs."""
    _, bundle = BREAKS.unbroken(_needs_ignored)(output)
    return JobState.PUBLISHED, {**bundle, "needs": None}


def _never_holds_checkpoint(delivery: RunDelivery | None, stasis: Any) -> bool:
    """A worker that takes every Run for checkpoint-free as it settles: a resumed hop
    leaves its checkpoint behind (caught by settled_hop_releases_checkpoint)."""
    return False


async def _counted_from_claim(self: Worker, run_id: UUID, seq: int) -> HopOutcome:
    """The drain count as it was: a hop counts only once its claim committed, so a
    mutation proceeds while a slow claim is still in flight (caught by
    mutation_quiesced in runtime_mutation)."""
    await self.gate.wait_open()
    token = str(self.deps.entropy.new_id())
    self.live_claims.add(token)
    ledger, clock = self.deps.ledger, self.deps.clock
    try:
        claim = await self._ledger(
            lambda: ledger.claim_delivery(run_id, seq, self.deps.boot_id, token, clock.now())
        )
        if not claim.claimed or claim.run is None:
            return HopOutcome.SKIPPED
        self.in_flight += 1
        events = HopEvents(self.deps, self.bus, claim.run, seq)
        try:
            async with events:
                await events.publish(EventKind.RUN_CLAIMED, {"seq": seq})
                return await self._hop(claim.run, claim.delivery, events)
        finally:
            self.in_flight -= 1
            if events.debt:
                self.evidence_debt[run_id] = seq
    finally:
        self.live_claims.discard(token)


async def _reports_won(self: Worker, run_id: UUID, seq: int) -> HopOutcome:
    """A hop that tells the broker it settled when it lost the claim (a duplicate or
    stale delivery): caught by hop_outcome_truthful."""
    outcome = await BREAKS.unbroken(_reports_won)(self, run_id, seq)
    return HopOutcome.SETTLED if outcome is HopOutcome.SKIPPED else outcome


def _owes_from_the_claim(self: HopEvents, deps: Deps, bus: Any, run: Run, seq: int) -> None:
    """A hop that owes its terminal Step from its claim on, not from its terminal truth:
    a hop that parks (or is fenced) leaves an evidence debt for a live Run (caught by
    debt_after_truth; the mutation tool's survivor `hop.py:64`, `debt = True`)."""
    BREAKS.unbroken(_owes_from_the_claim)(self, deps, bus, run, seq)
    self.debt = True


async def _evidence_without_channel(self: Canceller, run: Run) -> None:
    """The canceller's terminal evidence without its live part: the Step is written,
    but the Run's channel neither hears run.cancelled nor closes, so its readers wait
    on a final Run (caught by cancel_closes_channel; the mutation tool's survivor
    `cancel.py:105`, `bus is not None` made `is None`)."""
    await write_or_owe(self.deps, run, self.evidence_debt)


async def _exit_attached(self: HopEvents, exc_type: Any, exc: Any, tb: Any) -> None:
    """A hop that leaves without detaching its Step writer: a parked Run's open channel
    still tees to a writer that closed (caught by tee_to_live_writer; the mutation
    tool's survivor `hop.py:79`, `is not None` made `is None`)."""
    await self.writer.__aexit__(exc_type, exc, tb)


async def _park_raises(self: HopEvents, status: RunStatus) -> None:
    """A park whose evidence raises out of the hop instead of being owed: the broker
    sees the hop fail (caught by hop_ends_with_an_outcome)."""
    raise RuntimeError(f"run.parked Step for {status.value} could not be staged")


async def _contain_then_doubt(self: Canceller, run: Run) -> bool:
    """Containment that fences the parent and its children, then reports them
    unacknowledged: every cancel answers CANCELLING (caught by cancel_completes)."""
    if await self._fence_parent(run):
        await self.contain_children(run)
    return False


async def _never_touch(self: Worker, key: str) -> None:
    """A hop that never touches its broker job: the heartbeat sweep takes a long
    hop's job while it still runs (caught by hop_heartbeat)."""


def _gate_stays_open(self: ClaimGate) -> None:
    """A pre-claim gate whose close does nothing: hops claim during a mutation."""


async def _never_park(engine: RunEngine, run: Run) -> None:
    """Orphan recovery that never looks for a pre-park window: a hop that died with
    its checkpoint and owner row saved fails as lost instead of being parked (a
    legal terminal state, so only crash_window_outcome notices)."""
    return None


def _next_hop_key(run_id: UUID, seq: int) -> str:
    """Orphan recovery probing the next sequence's key (an off-by-one): it never
    finds the dead boot's job, so it never fences it (caught by crash_window_outcome
    at claim.committed)."""
    return hop_key(run_id, seq + 1)


async def _claim_catches_up(self: Worker, run_id: UUID, seq: int, token: str) -> HopOutcome:
    """A worker whose claim of an old hop key is refused 'catches up': it claims the
    Run's current sequence instead, so a stale duplicate job runs the newer hop
    (caught by stale_hop_inert)."""
    outcome = await BREAKS.unbroken(_claim_catches_up)(self, run_id, seq, token)
    if outcome is not HopOutcome.SKIPPED:
        return outcome
    run = await self.deps.ledger.get_run(run_id)
    if run is None or run.seq == seq or run.status is not RunStatus.QUEUED:
        return outcome
    return await BREAKS.unbroken(_claim_catches_up)(self, run_id, run.seq, token)


async def _admit_upserts(
    self: MemoryLedger, run: Run, delivery: RunDelivery, *, fence_session: bool = True
) -> Admission:
    """admit_run as an upsert ('ON CONFLICT (id) DO UPDATE'): a second admission of a
    scoped key whose content differs overwrites the first instead of being refused
    (caught by idempotent_admission once two admissions of a key race)."""
    existing = self.run_table.get(run.id)
    if existing is None or existing.fingerprint == run.fingerprint \
            or existing.seq != 0 or existing.status is not RunStatus.QUEUED:
        admit = BREAKS.unbroken(_admit_upserts)
        return await admit(self, run, delivery, fence_session=fence_session)
    await enter()
    self.run_table[run.id] = run  # the Run row updated; its delivery row kept
    return Admission(run=run, delivery=self.delivery_table[(run.id, 0)], created=True)


@asynccontextmanager
async def _admitting_as_two_vessels(
    self: AdmissionCoordinator, key: str | None, session: str | None
) -> AsyncIterator[None]:
    """Admissions as two Vessels make them: each process has its own coordinator,
    so nothing in-process serialises a key; only the ledger decides."""
    async with self._maybe(self.sessions, session):
        yield


def _equal_run_is_own(admission: Admission, run: Run, delivery: RunDelivery) -> bool:
    """The admission's own-commit test as it was: an equal stored Run is taken for
    this call's own commit, so a Vessel racing another on the same key carries on
    as the creator of the other's HELD admission without its hook (caught by
    failure_has_cause in admission_race: a runtime AssertionError)."""
    return admission.run == run


async def _claim_over_cancelling(
    self: MemoryLedger, run_id: UUID, seq: int, boot_id: str, token: str, now: datetime
) -> Claim:
    """The claim CAS that also takes a Run gone CANCELLING at exactly this sequence: a
    hop dequeued before the cancel (paused between dequeue and claim) claims it anyway
    (caught by claim_is_exact in the paused scenario)."""
    await enter()
    run = self.run_table.get(run_id)
    d = self.delivery_table.get((run_id, seq))
    if run is None or d is None or run.status is not RunStatus.CANCELLING or run.seq != seq \
            or d.state not in (DeliveryState.PENDING, DeliveryState.PUBLISHED):
        claim = BREAKS.unbroken(_claim_over_cancelling)
        return await claim(self, run_id, seq, boot_id, token, now)
    run = self._put_run(run, status=RunStatus.RUNNING, started_at=run.started_at or now,
                        updated_at=now)
    d = self._put_delivery(d, state=DeliveryState.CLAIMED, claimed_boot=boot_id,
                           claim_token=token, updated_at=now)
    return Claim(claimed=True, run=run, delivery=d)


async def _every_boot_dead(deps: object, delivery: RunDelivery | None) -> bool:
    """Orphan recovery that takes every other boot for dead, its lease unread: a live
    peer's hop is fenced and failed as lost (caught by orphans_of_earlier_boots)."""
    return False


async def _renewal_trusts_its_start(self: BootLeaseKeeper) -> bool:
    """Lease renewal as cb0701b left it: measured from its first attempt, however long it
    retried through an outage. Such a boot calls its lease unbroken and goes on judging
    peers whose renewals fell due earlier in the outage and lapsed (caught by
    orphans_of_earlier_boots in two_vessels)."""
    now = self.deps.clock.now()
    try:
        live = await self.deps.ledger.renew_boot(self.deps.boot_id, self.lease_s, now)
    except Exception:
        self.steady_since = None
        raise
    self.renewed_at = now
    if not live or self.steady_since is None:
        self.steady_since = now
    return live


def _always_steady(self: BootLeaseKeeper) -> bool:
    """A boot that judges other boots by their leases whatever its own lease says: after
    an outage that lapsed every lease, or while its own renewal still retries, it fails
    a live peer's hops as lost (caught by orphans_of_earlier_boots in two_vessels)."""
    return True


async def _recorded_evidence_left(self: Relays, older_than_s: float) -> None:
    """Relays that pay only their own process's evidence debts: a boot that died between
    terminal truth and its Step, with no restart after it (a zombie's successor already
    serves), leaves the Run without its terminal Step (caught by terminal_evidence_once)."""
    return None


async def _retire_any_dequeued_job(
    self: DeliveryRecovery, run: Run, delivery: RunDelivery, job: JobInfo
) -> DeliveryVerdict:
    """Delivery recovery that retires every other boot's dequeued job, its taker's lease
    unread: a live peer's job is fenced before that peer could claim it (caught by
    orphans_of_earlier_boots)."""
    if job.boot_id == self.engine.deps.boot_id:
        return await BREAKS.unbroken(_retire_any_dequeued_job)(self, run, delivery, job)
    return await self.redeliver_stranded(run, delivery, job)


async def _checkpoint_unfenced(self: MemoryLedger, record: CheckpointRecord) -> bool:
    """A checkpoint write that does not check the hop still holds its Run: a zombie's
    hop, failed as lost meanwhile, stores its stasis anyway (fenced_holder_inert)."""
    await enter()
    self.checkpoint_table[record.run_id] = record
    return True


async def _serve_on_the_registration(self: Lifespan, lease: BootLeaseKeeper) -> None:
    """Startup that serves on the lease it registered before reconciling: after a long
    reconciliation its workers take jobs while peers may judge that lease expired."""
    return None



def _queued_as_pre_boot(self: DeliveryRecovery, status: JobStatus,
                        started_at: float | None) -> bool:
    """Delivery recovery that fences every live job it finds, queued ones included, as
    if each were a pre-boot generation: a Run waiting its turn is aborted and rotated."""
    return status in (JobStatus.NEW, JobStatus.DEFERRED, JobStatus.QUEUED) \
        or BREAKS.unbroken(_queued_as_pre_boot)(self, status, started_at)


async def _cleanup_owes_nothing(deps: Deps, page_size: int) -> list[UUID]:
    """Startup's checkpoint cleanup that retries every owed deletion but reports
    nothing owed: the report hides the checkpoints that would not go."""
    await BREAKS.unbroken(_cleanup_owes_nothing)(deps, page_size)
    return []


async def _first_page_only(
    ledger: Ledger, statuses: Sequence[RunStatus], page_size: int = PAGE_SIZE
) -> AsyncIterator[Run]:
    """Startup reconciliation that reads one page of each status and stops: every Run
    past the first page waits for the relay."""
    for run in await ledger.page_runs(statuses, None, page_size):
        yield run


async def _service_refire_inverted(engine: RunEngine, run: Run) -> object:
    """Startup's service wait pass with its verdict read backwards (the negated
    `if await refresh_service(...)` mutant): the report names the waits it left
    parked as refired and leaves out those it re-admitted (caught by
    startup_refired_true)."""
    resumed = await BREAKS.unbroken(_service_refire_inverted)(engine, run)
    return None if resumed else run


async def _forward_never_moves(self: PageScheduler, read: PageReader, visit: Visit) -> int:
    """A relay page scheduler whose forward cursor never leaves the first page: a Run
    past it is never visited by any relay pass."""
    seen = await BREAKS.unbroken(_forward_never_moves)(self, read, visit)
    self.forward = None
    return seen


async def _cursor_rounded_down(self: PageScheduler, start: Cursor, read: PageReader,
                               visit: Visit) -> tuple[int, Cursor]:
    """A relay page scheduler whose forward cursor keeps the last Run's id but a
    timestamp a microsecond earlier (a cursor rounded down on its way through a
    serialiser): each next page starts at the Run the last one ended with."""
    seen, last = await BREAKS.unbroken(_cursor_rounded_down)(self, start, read, visit)
    if last is not None and last != start:
        last = (last[0] - timedelta(microseconds=1), last[1])
    return seen, last


async def _dequeued_unacknowledged(self: DeliveryRecovery, run: Run, delivery: RunDelivery,
                                   job: JobInfo) -> DeliveryVerdict:
    """Delivery recovery that retains a dequeued job (this boot's or a live peer's)
    without recording the missed acknowledgement: the row stays PENDING."""
    if delivery.state is DeliveryState.PENDING:
        delivery = delivery.model_copy(update={"state": DeliveryState.PUBLISHED})
    return await BREAKS.unbroken(_dequeued_unacknowledged)(self, run, delivery, job)


async def _finished_job_fencing(self: DeliveryRecovery, run: Run) -> DeliveryVerdict:
    """DeliveryRecovery.recover with its ABORTING test written as a string comparison
    (`> "aborting"`): a QUEUED Run's completed or failed job reads as still fencing, and
    the Run waits behind it for ever."""
    deps = self.engine.deps
    delivery = await deps.ledger.get_delivery(run.id, run.seq)
    if delivery is None or delivery.state not in (
        DeliveryState.HELD, DeliveryState.PENDING, DeliveryState.PUBLISHED
    ) or delivery.state is DeliveryState.HELD:
        return await BREAKS.unbroken(_finished_job_fencing)(self, run)
    job = await deps.broker.probe(delivery.key)
    if job is None or (job.status is JobStatus.ACTIVE
                       and not deliveries.trustworthy_start(job.started_at)):
        return await BREAKS.unbroken(_finished_job_fencing)(self, run)
    if job.boot_id is not None and job.status in (JobStatus.ACTIVE, JobStatus.ABORTING):
        return await self._dequeued(run, delivery, job)
    if job.status.live and not self._pre_boot_active(job.status, job.started_at):
        if delivery.state is DeliveryState.PENDING:
            await deps.ledger.mark_published(run.id, run.seq, deps.clock.now())
        return DeliveryVerdict.RETAINED
    if job.status in (JobStatus.ABORTING, JobStatus.COMPLETE, JobStatus.FAILED):
        return DeliveryVerdict.FENCING
    return await BREAKS.unbroken(_finished_job_fencing)(self, run)


BREAKS = BreakTable({
    "claim_fence": (MemoryLedger, "claim_delivery", _unfenced_claim),
    "no_containment": (Canceller, "contain", _no_containment),
    "orphan_fence": (DeliveryRecovery, "recover", _rotate_without_fence),
    "stage_fence": (MemoryJobStore, "stage", _unfenced_stage),
    "blind_resubmit": (service_attempts, "_absent", _blind_absent),
    "cleanup_blocks_startup": (debts, "release_checkpoint", _fatal_release),
    "evidence_debt_forgotten": (MemoryLedger, "evidence_debts", _no_debts),
    "late_job_left_queued": (RunEngine, "_fence_late_job", _leave_late_job),
    "cancelled_publisher_unfenced": (RunEngine, "_fence_late_job", _unfenced_when_cancelled),
    "duplicate_cancelled_step": (Canceller, "_evidence", _evidence_teed_to_hop),
    "reread_skips_evidence": (Canceller, "_reread", _reread_without_evidence),
    "prepark_any_run": (orphans, "binds_window", _window_of_any_run),
    "pin_misread": (Worker, "_execute", _misread_pin),
    "abandoned_hop_left_live": (orphans, "abandoned", _every_own_claim_live),
    "untrusted_start_fenced": (deliveries, "trustworthy_start", _any_start),
    "degenerate_start_trusted": (deliveries, "trustworthy_start", _present_start),
    "mismatch_passed_clean": (DeliveryRecovery, "_out_of_step", _mismatch_as_settled),
    "mismatch_called_corrupt": (DeliveryRecovery, "_out_of_step", _every_doubt_corrupt),
    # The retry bound of the old count-based loop (6 tries, about 1.5 s): a
    # database restart outlasts it and the hop fails its Run (issue M11).
    "effect_ignores_cancelling": (HopContext, "effect", _effect_while_cancelling),
    "gate_effect_skipped": (HopContext, "effect", _gate_effect_skipped),
    "errands_past_rounds": (Pattern, "node", _errands_past_rounds),
    "chatty_renumbered": (WorkflowRegistry, "register", _chatty_renumbered),
    "errands_stop_early": (Pattern, "node", _errands_stop_early),
    "resume_refuses_own_snapshot": (GraphRunner, "_resume_point", _resume_refuses_own),
    "needs_ignored": (jobs_worker, "read_bundle", _needs_ignored),
    "settle_keeps_checkpoint": (worker_module, "_may_hold_checkpoint", _never_holds_checkpoint),
    "token_deltas_dropped": (HopContext, "token", _token_dropped),
    "replay_republishes_claimed": (RunEngine, "_replay", _replay_republishes),
    "claim_outside_drain": (Worker, "perform_run", _counted_from_claim),
    "gate_never_closes": (ClaimGate, "close", _gate_stays_open),
    "claim_reports_won": (Worker, "perform_run", _reports_won),
    "heartbeat_stopped": (Worker, "_touch", _never_touch),
    "cancel_never_completes": (Canceller, "contain", _contain_then_doubt),
    "park_escapes_hop": (HopEvents, "parked", _park_raises),
    "debt_before_truth": (HopEvents, "__init__", _owes_from_the_claim),
    "writer_left_attached": (HopEvents, "__aexit__", _exit_attached),
    "channel_left_open_after_cancel": (Canceller, "_evidence", _evidence_without_channel),
    "short_ledger_retry": (retry, "RETRY_BUDGET_S", 1.5),
    # A retry that does not back off: it hammers a database that is down and
    # spends its whole budget in a burst (caught by retry_backoff).
    "lazy_ledger_retry": (retry, "BASE_DELAY_S", 0.0),
    # A heartbeat a second too slow: a long hop's touches drift off the 30 s period.
    "slow_heartbeat": (worker_module, "TOUCH_EVERY_S", 31),
    # Lanes wider than the process is sized for (caught by lane_bounds).
    "wide_lanes": (profiles, "DEFAULT_CONCURRENCY", {"runs": 8, "rites": 2}),
    "second_terminal_step_written": UNGUARDED_LEDGER,
    "redelivery_waits_for_sweep": (DeliveryRecovery, "redeliver_stranded", _wait_for_sweep),
    "window_never_parked": (orphans, "_park_window", _never_park),
    "stale_claim_catches_up": (Worker, "_claim_and_hop", _claim_catches_up),
    "admission_key_upserted": (MemoryLedger, "admit_run", _admit_upserts),
    "racing_admission_as_creator": (engine_module, "own_commit", _equal_run_is_own),
    "orphan_job_left_active": (orphans, "hop_key", _next_hop_key),
    # Pauses, zombies and several Vessels (issues 15 and 18; sim.pause, sim.boot_checks).
    "claim_over_cancelling": (MemoryLedger, "claim_delivery", _claim_over_cancelling),
    "fence_live_boot": (orphans, "claimed_by_live_boot", _every_boot_dead),
    "orphans_of_any_boot": (BootLeaseKeeper, "steady", _always_steady),
    "recorded_evidence_left": (Relays, "_repair_recorded_evidence", _recorded_evidence_left),
    "fence_peer_dequeued_job": (DeliveryRecovery, "_dequeued", _retire_any_dequeued_job),
    "checkpoint_unfenced": (MemoryLedger, "save_checkpoint", _checkpoint_unfenced),
    "lease_stale_at_ready": (Lifespan, "_renew_before_serving", _serve_on_the_registration),
    "renewal_trusts_its_start": (BootLeaseKeeper, "renew_once", _renewal_trusts_its_start),
    # The ledger's Step log as 847ff19 left it: only a second terminal Step is refused,
    # so a zombie hop's late Steps land after its Run's terminal one.
    "steps_after_terminal_written": (MemoryLedger, "closes_at_terminal", False),
    # Recovery's paging past one page (issue M9; sim.page_checks, scenario crowded).
    "reconcile_first_page_only": (reconcile, "all_runs", _first_page_only),
    "cleanup_debts_unreported": (debts, "_release_checkpoints", _cleanup_owes_nothing),
    "queued_job_fenced": (DeliveryRecovery, "_pre_boot_active", _queued_as_pre_boot),
    "relay_first_page_only": (PageScheduler, "step", _forward_never_moves),
    "relay_cursor_rounded_down": (PageScheduler, "_read_page", _cursor_rounded_down),
    "dequeued_ack_skipped": (DeliveryRecovery, "_dequeued", _dequeued_unacknowledged),
    "finished_job_fenced": (DeliveryRecovery, "recover", _finished_job_fencing),
    # The startup report's refired list (issue M9; sim.startup_checks).
    "service_refire_inverted": (reconcile, "refresh_service", _service_refire_inverted),
})
BREAKS.merge(RULE_BREAKS)  # one break per seed rule: sim.rules lists what each violates
# A zombie's hop is fenced twice: orphan recovery aborts its broker job (the worker
# cancels the hop as it resumes) and the ledger refuses its writes by claim and
# sequence. The break removes both, as a maintainer who misread the rule in both.
BREAKS.pair("checkpoint_unfenced", (orphans, "hop_key", _next_hop_key))
# Racing admissions reach the ledger only when no in-process lock serialises
# them, as with two Vessels on one database.
# The process then is no longer one Vessel: its single flight is not checked.
TWO_VESSEL_ADMISSIONS = (AdmissionCoordinator, "admitting", _admitting_as_two_vessels)
AS_TWO_VESSELS = (AdmissionChecks, "one_coordinator_per_vessel", False)
BREAKS.pair("admission_key_upserted", TWO_VESSEL_ADMISSIONS, AS_TWO_VESSELS)
BREAKS.pair("racing_admission_as_creator", TWO_VESSEL_ADMISSIONS, AS_TWO_VESSELS)
# Two boots failing one orphan, as two Vessels on one database do.
BREAKS.pair("second_terminal_step_written",
            (orphans, "write_or_owe", _two_boots_write_orphan_evidence))
# Breaks of the callers' terminal-evidence rules: the ledger would refuse the
# second Step they write (issue 15, M11), so each comes with the ledger unguarded.
BREAKS.pair("duplicate_cancelled_step", UNGUARDED_LEDGER)
BREAKS.pair("evidence_repaired_twice", UNGUARDED_LEDGER)



@contextmanager
def broken(name: str | None) -> Iterator[None]:
    """Break `name` (a name of `BREAKS`) for the duration; None or "" breaks nothing."""
    if not name:
        yield
        return
    with BREAKS.applied(name):
        yield


def from_env() -> str | None:
    return os.environ.get(ENV) or None
