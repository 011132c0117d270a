"""reconcile_runs: startup reconciliation, called by lifespan with its boot cutoff.

Seed 000_81a5c720b14d934a.txt ("Cancellation, mutation, and recovery"), in
its order: retry CANCELLING; pay the terminal debts recorded where they arose
(missing terminal Steps, idempotent checkpoint deletion, late-job fences:
runtime.recovery.debts; a failure is owed, never fatal), so startup reads
open work and debt, never all terminal history; fence and classify orphaned
RUNNING / AWAITING_HARDWARE work (park the exact pre-park windows, fail the rest as lost after
containment); re-admit decided consents, terminal delegated waits and proven service
waits (sending a parked attempt still PREPARED); then
recover every QUEUED Run's exact delivery: a missing or mismatched delivery row
and an active broker job without a trustworthy start time make the pass degraded
(runtime.recovery.deliveries), which the strict profile refuses to serve. It is never registered as
broker-callable work: only a process that knows its own boot cutoff can tell
orphans from live hops.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from uuid import UUID

from runtime import faults
from runtime.cancel import Canceller
from runtime.engine import RunEngine
from runtime.models import RunStatus
from runtime.recovery.debts import pay_startup_debts
from runtime.recovery.deliveries import DeliveryRecovery, DeliveryVerdict
from runtime.recovery.orphans import OrphanVerdict, recover_orphan
from runtime.recovery.pages import all_runs
from runtime.stasis.consent import refire_consent
from runtime.stasis.delegate import refresh_delegate
from runtime.stasis.service import refresh_service

log = logging.getLogger(__name__)


@dataclass
class ReconcileReport:
    cancelling: dict[str, list[UUID]] = field(default_factory=dict)
    orphans: dict[str, list[UUID]] = field(default_factory=dict)
    deliveries: dict[str, list[UUID]] = field(default_factory=dict)
    refired: list[UUID] = field(default_factory=list)
    repaired: list[UUID] = field(default_factory=list)
    cleanup_owed: list[UUID] = field(default_factory=list)
    """Terminal Runs whose checkpoint could not be deleted: owed to the relay,
    never a reason to degrade or abort startup (cleanup cannot conceal truth)."""

    @property
    def failed_orphans(self) -> list[UUID]:
        return self.orphans.get(OrphanVerdict.FAILED_LOST, [])

    @property
    def degraded_reasons(self) -> list[str]:
        reasons = []
        if self.orphans.get(OrphanVerdict.UNCONTAINED):
            reasons.append("orphans whose effects could not be contained")
        if self.deliveries.get(DeliveryVerdict.CORRUPT):
            reasons.append("QUEUED Runs without their delivery row")
        if self.deliveries.get(DeliveryVerdict.MISMATCHED):
            reasons.append("QUEUED Runs whose delivery row does not match")
        if self.deliveries.get(DeliveryVerdict.UNTRUSTED_START):
            reasons.append("active broker jobs without a trustworthy start time")
        return reasons

    @property
    def degraded(self) -> bool:
        return bool(self.degraded_reasons)


async def reconcile_runs(
    engine: RunEngine,
    boot_cutoff: datetime,
    canceller: Canceller | None = None,
    *,
    may_fence_others: bool = True,
) -> ReconcileReport:
    """`canceller` carries the process's event bus and evidence debts (lifespan's).
    `may_fence_others` False (a boot that shares its database with other
    Vessels and has just registered): other boots' hops are left to the relay,
    which judges their leases once this boot's own lease is steady."""
    deps = engine.deps
    await deps.faults.point(faults.RECONCILE_STARTED, boot=deps.boot_id)
    report = ReconcileReport()
    canceller = canceller or Canceller(deps)
    async for run in all_runs(deps.ledger, (RunStatus.CANCELLING,)):
        done = await canceller.cancel(run.id)
        report.cancelling.setdefault(done.status.value, []).append(run.id)
    debts = await pay_startup_debts(deps)
    report.repaired, report.cleanup_owed = debts.repaired, debts.cleanup_owed
    if canceller.evidence_debt is not None:  # owed to the relay, keep starting
        canceller.evidence_debt.update(debts.evidence_owed)
    async for run in all_runs(deps.ledger, (RunStatus.RUNNING, RunStatus.AWAITING_HARDWARE)):
        verdict = await recover_orphan(engine, canceller, run, may_fence_others=may_fence_others)
        report.orphans.setdefault(verdict, []).append(run.id)
    async for run in all_runs(deps.ledger, (RunStatus.AWAITING_CONSENT,)):
        if await refire_consent(engine, run):
            report.refired.append(run.id)
    async for run in all_runs(deps.ledger, (RunStatus.AWAITING_DELEGATE,)):
        if await refresh_delegate(engine, run):
            report.refired.append(run.id)
    async for run in all_runs(deps.ledger, (RunStatus.AWAITING_SERVICE,)):
        if await refresh_service(engine, run):
            report.refired.append(run.id)
    recovery = DeliveryRecovery(engine, boot_cutoff, may_fence_others=may_fence_others)
    async for run in all_runs(deps.ledger, (RunStatus.QUEUED,)):
        outcome = await recovery.recover(run)
        report.deliveries.setdefault(outcome, []).append(run.id)
    return report

