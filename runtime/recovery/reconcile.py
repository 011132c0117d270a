"""reconcile_runs: startup reconciliation, called by lifespan with its boot cutoff.

This is the first slice of seed 000_81a5c720b14d934a.txt ("Cancellation,
mutation, and recovery", startup): orphaned RUNNING or AWAITING_HARDWARE
work claimed by an earlier boot is fenced at the broker and failed as lost
(uncheckpointed death is never replayed), then every QUEUED Run's exact
delivery is recovered. It is never registered as broker-callable work: only
a process that knows its own boot cutoff can tell orphans from live hops.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from uuid import UUID

from runtime import faults
from runtime.engine import RunEngine
from runtime.models import Run, RunStatus
from runtime.recovery.deliveries import DeliveryRecovery, DeliveryVerdict

log = logging.getLogger(__name__)

PAGE_SIZE = 50
LOST = "lost: the process died during an uncheckpointed hop"


@dataclass
class ReconcileReport:
    failed_orphans: list[UUID] = field(default_factory=list)
    unfenced_orphans: list[UUID] = field(default_factory=list)
    deliveries: dict[str, list[UUID]] = field(default_factory=dict)

    @property
    def degraded(self) -> bool:
        corrupt = self.deliveries.get(DeliveryVerdict.CORRUPT, [])
        return bool(self.unfenced_orphans or corrupt)


async def reconcile_runs(engine: RunEngine, boot_cutoff: datetime) -> ReconcileReport:
    deps = engine.deps
    await deps.faults.point(faults.RECONCILE_STARTED, boot=deps.boot_id)
    report = ReconcileReport()
    async for run in _pages(engine, (RunStatus.RUNNING, RunStatus.AWAITING_HARDWARE)):
        await _fail_orphan(engine, run, report)
    recovery = DeliveryRecovery(engine, boot_cutoff)
    async for run in _pages(engine, (RunStatus.QUEUED,)):
        verdict = await recovery.recover(run)
        report.deliveries.setdefault(verdict, []).append(run.id)
    return report


async def _fail_orphan(engine: RunEngine, run: Run, report: ReconcileReport) -> None:
    deps = engine.deps
    delivery = await deps.ledger.get_delivery(run.id, run.seq)
    if delivery is not None and delivery.claimed_boot == deps.boot_id:
        return  # a live hop of this boot
    await deps.broker.abort(f"run:{run.id}:{run.seq}", "fenced: orphaned by process death")
    failed = await deps.ledger.fail_orphan(run.id, run.seq, deps.boot_id, LOST, deps.clock.now())
    if failed is None:
        report.unfenced_orphans.append(run.id)
    else:
        report.failed_orphans.append(run.id)


async def _pages(engine: RunEngine, statuses: tuple[RunStatus, ...]):  # type: ignore[no-untyped-def]
    """Every Run in `statuses`, paged by (updated_at, id)."""
    cursor: tuple[datetime, UUID] | None = None
    while True:
        page = await engine.deps.ledger.page_runs(statuses, cursor, PAGE_SIZE)
        for run in page:
            yield run
        if len(page) < PAGE_SIZE:
            return
        cursor = (page[-1].updated_at, page[-1].id)
