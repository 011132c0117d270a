"""Orphans: RUNNING or AWAITING_HARDWARE work claimed by an earlier boot.

Seed 000 ("Cancellation, mutation, and recovery") and seed 003 ("Return
makes a new claim"): process death never guesses a replay. The broker's
pre-boot job is fenced first. Then the exact pre-park windows are parked:
a checkpoint of this hop whose first pending snapshot binds this same Run
id (`binds_window`) and the latest non-cancelled consent (or an existing
agent job, or service attempt, of this Run). A decided consent is parked and re-fired; a parked
service attempt is left to the service-wait pass that follows. Everything else has its correlated
effects contained and fails as lost; when containment cannot be proved the
Run stays nonterminal and the pass is degraded. "Earlier boot" means a dead
one (issue 15, M11): a hop claimed by another Vessel's boot whose lease is
still live is left alone, and the relay re-examines it once the lease expires.

The relay also recovers, in the same live boot, a hop of this boot whose
broker job was aborted under it: its claim token is no longer among the
worker's live claims and its exact job is ABORTED (a sweep found its
heartbeat lapsed, in this process or one whose clock runs ahead, and the
worker cancelled the hop) or gone from the broker. Nothing else in this boot
would ever settle it; it takes the same path as an orphan (park the exact
pre-park window, else contain children and fail), fenced by that exact claim
token instead of by a foreign boot (`abandoned`). A hop that failed out of
its job (FAILED) is not that: persistent failure stays explicit nonterminal
truth until restart (seed 000 has no same-boot failure-custody watchdog).
"""

from __future__ import annotations

import enum
from collections.abc import Collection
from contextlib import suppress

from pydantic import ValidationError

from runtime.cancel import Canceller
from runtime.engine import RunEngine
from runtime.errors import BrokerUnavailable
from runtime.events.repair import write_or_owe
from runtime.graph.snapshots import Checkpoint, NodeSnapshot
from runtime.keys import hop_key
from runtime.models import CheckpointRecord, ConsentStatus, Run, RunDelivery
from runtime.recovery.boot_lease import Judge, may_judge
from runtime.seams import Deps, JobStatus
from runtime.stasis.consent import refire_consent

LOST = "lost: the process died during an uncheckpointed hop"
ABANDONED = "lost: a sweep aborted the hop's broker job under its claim in this boot"


class OrphanVerdict(enum.StrEnum):
    LIVE = "live"
    LIVE_ELSEWHERE = "live_elsewhere"
    PARKED_CONSENT = "parked_consent"
    PARKED_DELEGATE = "parked_delegate"
    PARKED_SERVICE = "parked_service"
    FAILED_LOST = "failed_lost"
    FAILED_ABANDONED = "failed_abandoned"
    UNCONTAINED = "uncontained"
    MOVED = "moved"


async def recover_orphan(
    engine: RunEngine,
    canceller: Canceller,
    run: Run,
    live_claims: Collection[str] | None = None,
    *,
    may_fence_others: Judge = True,
) -> OrphanVerdict:
    """`live_claims`: the claim tokens of this process's running hops (the relay
    passes the worker's); None (startup, before any hop) leaves every claim of
    this boot alone.
    `may_fence_others` False: this boot cannot yet judge other boots dead
    (its own lease was not continuously live for a whole lease, so theirs may
    have lapsed only because the database was unreachable for everyone)."""
    deps = engine.deps
    delivery = await deps.ledger.get_delivery(run.id, run.seq)
    if delivery is not None and delivery.claimed_boot == deps.boot_id:
        if live_claims is None or not await abandoned(engine, delivery, live_claims):
            return OrphanVerdict.LIVE
        return await _recover_abandoned(engine, canceller, run, delivery)
    if not may_judge(may_fence_others) or await claimed_by_live_boot(deps, delivery) \
            or not may_judge(may_fence_others):  # asked again once the lease is read
        return OrphanVerdict.LIVE_ELSEWHERE  # re-examined once that boot's lease expires
    key = hop_key(run.id, run.seq)
    job = await deps.broker.probe(key)
    if job is not None and job.status.live and job.status is not JobStatus.ABORTING:
        # The claim CAS already fences this dead boot's hop; the abort lets the
        # broker retire the job, and a lost acknowledgement is retried next pass.
        with suppress(BrokerUnavailable):
            await deps.broker.abort(key, "fenced: orphaned by process death")
    parked = await _park_window(engine, run)
    if parked is not None:
        return parked
    # The parent job belongs to a dead boot: the abort above and the claim CAS
    # fence it. What may still act is a child: contain those before failing.
    if not await canceller.contain_children(run):
        return OrphanVerdict.UNCONTAINED
    failed = await deps.ledger.fail_orphan(run.id, run.seq, deps.boot_id, LOST, deps.clock.now())
    if failed is None:
        return OrphanVerdict.MOVED
    await write_or_owe(deps, failed, canceller.evidence_debt)  # truth first, then its Step
    return OrphanVerdict.FAILED_LOST


async def abandoned(
    engine: RunEngine, delivery: RunDelivery, live_claims: Collection[str]
) -> bool:
    """Whether this boot's claim belongs to a hop its broker job was aborted
    under: no hop of this process holds its token, and its exact job is ABORTED
    or absent. A job still live (an abort not yet seen by its worker) is left to
    the next pass; a FAILED or COMPLETE one to restart reconciliation."""
    if delivery.claim_token is None or delivery.claim_token in live_claims:
        return False
    job = await engine.deps.broker.probe(delivery.key)
    return job is None or job.status is JobStatus.ABORTED


async def _recover_abandoned(
    engine: RunEngine, canceller: Canceller, run: Run, delivery: RunDelivery
) -> OrphanVerdict:
    deps = engine.deps
    parked = await _park_window(engine, run)
    if parked is not None:
        return parked
    if not await canceller.contain_children(run):
        return OrphanVerdict.UNCONTAINED
    assert delivery.claim_token is not None  # abandoned() saw it
    failed = await deps.ledger.fail_abandoned(
        run.id, run.seq, delivery.claim_token, ABANDONED, deps.clock.now()
    )
    if failed is None:
        return OrphanVerdict.MOVED
    await write_or_owe(deps, failed, canceller.evidence_debt)
    return OrphanVerdict.FAILED_ABANDONED


async def claimed_by_live_boot(deps: Deps, delivery: RunDelivery | None) -> bool:
    """Another Vessel's boot still holding its lease owns this hop (issue 15,
    M11): it is neither fenced nor failed. A boot that never registered (a
    single-Vessel deployment's earlier boot) or whose lease expired is dead."""
    if delivery is None or delivery.claimed_boot is None:
        return False  # no boot on record holds this claim
    return await deps.ledger.boot_alive(delivery.claimed_boot, deps.clock.now())


def binds_window(record: CheckpointRecord, run: Run) -> bool:
    """The exact-state rule of a pre-park window (seed 000, "Events, settlement,
    and waits"; "Cancellation, mutation, and recovery"): the checkpoint is this
    hop's, and its first resumable node snapshot names this same Run and exactly
    the owner (consent, agent job or service attempt) the record binds. A
    snapshot naming another Run, or a document that does not parse, is no
    window: the hop failed uncheckpointed and nobody is asked for a verdict."""
    if record.run_id != run.id or record.seq != run.seq:
        return False
    snap = _first_resumable(record)
    return (
        snap is not None
        and snap.run_id == run.id
        and (snap.consent_id, snap.agent_job_id, snap.service_attempt_id)
        == (record.consent_id, record.agent_job_id, record.service_attempt_id)
    )


def _first_resumable(record: CheckpointRecord) -> NodeSnapshot | None:
    try:
        return Checkpoint.model_validate(record.document).first_resumable()
    except ValidationError:
        return None


async def _park_window(engine: RunEngine, run: Run) -> OrphanVerdict | None:
    ledger, now = engine.deps.ledger, engine.deps.clock.now
    record = await ledger.load_checkpoint(run.id)
    if record is None or not binds_window(record, run):
        return None
    if record.consent_id is not None:
        live = [c for c in await ledger.consents_of(run.id)
                if c.status is not ConsentStatus.CANCELLED]
        if not live or live[-1].id != record.consent_id:
            return None
        parked = await ledger.park_consent(run.id, run.seq, record.consent_id, now())
        if parked is None:
            return None
        await refire_consent(engine, parked)  # an already decided owner resumes now
        return OrphanVerdict.PARKED_CONSENT
    if record.agent_job_id is not None:
        job = await ledger.get_agent_job(record.agent_job_id)
        if job is None or job.run_id != run.id:
            return None
        if await ledger.park_delegate(run.id, run.seq, job.id, now()) is None:
            return None
        return OrphanVerdict.PARKED_DELEGATE
    if record.service_attempt_id is not None:
        # park_service verifies the attempt exists and is owned by this Run; the
        # service-wait pass that follows (startup's or the relay's) sends it.
        if await ledger.park_service(run.id, run.seq, record.service_attempt_id, now()) is None:
            return None
        return OrphanVerdict.PARKED_SERVICE
    return None
