"""Recover one QUEUED Run's exact delivery (seed 000_81a5c720b14d934a.txt,
"Cancellation, mutation, and recovery": startup and the delivery relay).

Shared by startup reconciliation and the delivery relay. For the Run's
current delivery it decides, from durable truth only:
- HELD: refused here; only the caller's own replay may release it;
- no delivery row, or one whose state does not match a QUEUED Run (CLAIMED,
  SETTLED, FAILED): the Run is re-read first (a stale page is no evidence);
  if it still waits QUEUED at that sequence the verdict is CORRUPT or
  MISMATCHED, the pass is degraded and the Run is left alone;
- broker job absent: republish under the same key;
- job active without a trustworthy start time (missing, not a positive
  finite instant): UNTRUSTED_START, the pass is degraded and the job is left
  alone, for it cannot be proved to belong to an earlier boot;
- job active or aborting and stamped with the boot whose worker dequeued it
  (issue 15, M11): this boot's is retained; a live peer's (its lease not
  expired, or this boot not yet steady enough to judge) is left alone,
  never aborted, for that peer is about to claim it; a dead boot's is
  retired at once (no worker will ever finish it, and SAQ's heartbeat sweep
  would take minutes) and the Run rotated to a fresh sequence and published;
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
import math
from dataclasses import dataclass
from datetime import datetime

from runtime.engine import RunEngine
from runtime.errors import BrokerUnavailable
from runtime.models import DeliveryState, Run, RunDelivery, RunStatus
from runtime.recovery.boot_lease import Judge, may_judge
from runtime.seams import JobInfo, JobStatus

log = logging.getLogger(__name__)


class DeliveryVerdict(enum.StrEnum):
    HELD_REFUSED = "held_refused"
    REPUBLISHED = "republished"
    RETAINED = "retained"
    FENCING = "fencing"
    ROTATED = "rotated"
    SETTLED_ELSEWHERE = "settled_elsewhere"
    CORRUPT = "corrupt"
    MISMATCHED = "mismatched"
    UNTRUSTED_START = "untrusted_start"
    LIVE_ELSEWHERE = "live_elsewhere"

    @property
    def degraded(self) -> bool:
        """Delivery truth is missing or does not add up: the pass is degraded
        (seed 000, startup reconciliation) and the relay revisits the Run."""
        return self in DEGRADED_VERDICTS


DEGRADED_VERDICTS = frozenset(
    {DeliveryVerdict.CORRUPT, DeliveryVerdict.MISMATCHED, DeliveryVerdict.UNTRUSTED_START}
)


STRANDED = "retired: dequeued by a boot that died before claiming it"


@dataclass(frozen=True)
class DeliveryRecovery:
    engine: RunEngine
    boot_cutoff: datetime
    may_fence_others: Judge = True
    """False while this boot cannot yet judge other boots dead by their leases
    (runtime.recovery.boot_lease): their dequeued jobs are left for later."""

    async def recover(self, run: Run) -> DeliveryVerdict:
        deps = self.engine.deps
        delivery = await deps.ledger.get_delivery(run.id, run.seq)
        if delivery is None or delivery.state not in (
            DeliveryState.HELD, DeliveryState.PENDING, DeliveryState.PUBLISHED
        ):
            return await self._out_of_step(run, delivery)
        if delivery.state is DeliveryState.HELD:
            return DeliveryVerdict.HELD_REFUSED
        job = await deps.broker.probe(delivery.key)
        if job is None:
            await self.engine.publish(delivery)
            return DeliveryVerdict.REPUBLISHED
        if job.status is JobStatus.ACTIVE and not trustworthy_start(job.started_at):
            log.error("job %s is active without a trustworthy start time (%r): left alone",
                      delivery.key, job.started_at)
            return DeliveryVerdict.UNTRUSTED_START
        if job.boot_id is not None and job.status in (JobStatus.ACTIVE, JobStatus.ABORTING):
            return await self._dequeued(run, delivery, job)
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
        return await self._rotate(run)

    async def _dequeued(self, run: Run, delivery: RunDelivery, job: JobInfo) -> DeliveryVerdict:
        """A job a worker took for this QUEUED Run, stamped with that worker's boot."""
        deps = self.engine.deps
        assert job.boot_id is not None
        mine = job.boot_id == deps.boot_id
        if mine or not may_judge(self.may_fence_others) \
                or await deps.ledger.boot_alive(job.boot_id, deps.clock.now()) \
                or not may_judge(self.may_fence_others):  # asked again after the read
            if delivery.state is DeliveryState.PENDING:
                await deps.ledger.mark_published(run.id, run.seq, deps.clock.now())
            return DeliveryVerdict.RETAINED if mine else DeliveryVerdict.LIVE_ELSEWHERE
        return await self.redeliver_stranded(run, delivery, job)

    async def redeliver_stranded(
        self, run: Run, delivery: RunDelivery, job: JobInfo
    ) -> DeliveryVerdict:
        """A dead boot's dequeued, never claimed job: retire it now, then rotate
        the Run to a fresh sequence and publish that (a finished key is never
        published again). A retire that is not acknowledged is retried next pass."""
        deps = self.engine.deps
        try:
            retired = await deps.broker.retire(delivery.key, STRANDED)
        except BrokerUnavailable:
            return DeliveryVerdict.FENCING
        if retired is not None and not retired.status.finished:
            return DeliveryVerdict.FENCING
        return await self._rotate(run)

    async def _rotate(self, run: Run) -> DeliveryVerdict:
        deps = self.engine.deps
        rotated = await deps.ledger.rotate_delivery(run.id, run.seq, deps.clock.now())
        if rotated is None:
            return DeliveryVerdict.SETTLED_ELSEWHERE
        await self.engine.publish(rotated)
        return DeliveryVerdict.ROTATED

    async def _out_of_step(self, run: Run, delivery: RunDelivery | None) -> DeliveryVerdict:
        """The delivery row is missing or does not match a QUEUED Run. The page
        that listed the Run may be stale (a claim or a cancellation committed
        since), so the Run is re-read: only a Run still QUEUED at that very
        sequence makes the row corrupt or mismatched."""
        current = await self.engine.deps.ledger.get_run(run.id)
        if current is None or current.status is not RunStatus.QUEUED or current.seq != run.seq:
            return DeliveryVerdict.SETTLED_ELSEWHERE
        if delivery is None:
            log.error("Run %s is QUEUED but has no delivery %s", run.id, run.seq)
            return DeliveryVerdict.CORRUPT
        log.error("Run %s is QUEUED but its delivery %s is %s", run.id, run.seq,
                  delivery.state.value)
        return DeliveryVerdict.MISMATCHED

    def _pre_boot_active(self, status: JobStatus, started_at: float | None) -> bool:
        if status not in (JobStatus.ACTIVE, JobStatus.ABORTING):
            return False
        return started_at is None or started_at < self.boot_cutoff.timestamp()


def trustworthy_start(started_at: float | None) -> bool:
    """A start time the boot cutoff can be compared with: present, finite, positive."""
    return started_at is not None and math.isfinite(started_at) and started_at > 0
