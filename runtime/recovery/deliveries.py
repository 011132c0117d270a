"""Recover one QUEUED Run's exact delivery (seed 000_81a5c720b14d934a.txt,
"Cancellation, mutation, and recovery": startup and the delivery relay).

Shared by startup reconciliation and the delivery relay. For the Run's
current delivery it decides, from durable truth only:
- HELD: refused here; only the caller's own replay may release it;
- broker job absent: republish under the same key;
- job queued, or active and started in this boot: retained (and a missed
  acknowledgement is recorded);
- job active or aborting from a previous boot: fenced by abort, re-probed,
  and rotated only once the broker reports it finished;
- job finished while the Run still waits at that sequence: rotated to a new
  sequence that keeps the fresh/resume mode, then published.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from datetime import datetime

from runtime.engine import RunEngine
from runtime.errors import BrokerUnavailable
from runtime.models import DeliveryState, Run
from runtime.seams import JobStatus

log = logging.getLogger(__name__)


class DeliveryVerdict(enum.StrEnum):
    HELD_REFUSED = "held_refused"
    REPUBLISHED = "republished"
    RETAINED = "retained"
    FENCING = "fencing"
    ROTATED = "rotated"
    SETTLED_ELSEWHERE = "settled_elsewhere"
    CORRUPT = "corrupt"


@dataclass(frozen=True)
class DeliveryRecovery:
    engine: RunEngine
    boot_cutoff: datetime

    async def recover(self, run: Run) -> DeliveryVerdict:
        deps = self.engine.deps
        delivery = await deps.ledger.get_delivery(run.id, run.seq)
        if delivery is None:
            log.error("Run %s is QUEUED but has no delivery %s", run.id, run.seq)
            return DeliveryVerdict.CORRUPT
        if delivery.state is DeliveryState.HELD:
            return DeliveryVerdict.HELD_REFUSED
        if delivery.state not in (DeliveryState.PENDING, DeliveryState.PUBLISHED):
            return DeliveryVerdict.SETTLED_ELSEWHERE
        job = await deps.broker.probe(delivery.key)
        if job is None:
            await self.engine.publish(delivery)
            return DeliveryVerdict.REPUBLISHED
        if job.status.live and not self._pre_boot_active(job.status, job.started_at):
            if delivery.state is DeliveryState.PENDING:
                await deps.ledger.mark_published(run.id, run.seq, deps.clock.now())
            return DeliveryVerdict.RETAINED
        if job.status is JobStatus.ABORTING:
            return DeliveryVerdict.FENCING  # aborting already: the sweep finishes it
        if job.status.live:
            try:
                fenced = await deps.broker.abort(delivery.key, "fenced: pre-boot generation")
            except BrokerUnavailable:
                return DeliveryVerdict.FENCING  # re-probed on the next pass
            if fenced is None or not fenced.status.finished:
                return DeliveryVerdict.FENCING
        rotated = await deps.ledger.rotate_delivery(run.id, run.seq, deps.clock.now())
        if rotated is None:
            return DeliveryVerdict.SETTLED_ELSEWHERE
        await self.engine.publish(rotated)
        return DeliveryVerdict.ROTATED

    def _pre_boot_active(self, status: JobStatus, started_at: float | None) -> bool:
        if status not in (JobStatus.ACTIVE, JobStatus.ABORTING):
            return False
        return started_at is None or started_at < self.boot_cutoff.timestamp()
