"""The publisher's own fence for a hop job that landed behind a cancellation.

Seed 000_81a5c720b14d934a.txt, "Cancellation, mutation, and recovery" (the
paragraph on a publisher that loses its acknowledgement after cancellation):
a publish may still be in flight while the Run is cancelled. The canceller
probed the hop key before the job landed, saw nothing and settled the Run;
the job then lands, and the publisher sees no acknowledgement (or sees the
delivery already closed). Only the publisher knows that this job may exist,
so it fences it itself:

- it reads the Run; only a Run whose cancellation began (CANCELLING or
  CANCELLED) at this exact sequence is fenced: a Run still QUEUED keeps its
  job (the delivery relay owns a lost acknowledgement), and a Run claimed or
  finished by this very job is never disturbed;
- it sends an exact abort for the hop key and re-probes whenever that abort
  is itself unacknowledged, at most `LATE_ABORT_ATTEMPTS` times;
- the caller runs it shielded, so it completes even while the caller is
  being cancelled, and the caller's cancellation propagates afterwards.

A fence that never got an acknowledgement is reported as `UNFENCED`, never
as containment: the job stays harmless behind the Run/delivery claim CAS (a
CANCELLING or CANCELLED Run can never be claimed) and the exact abort is
retried by an explicit cancellation (which repeats the parent fence of a
CANCELLED Run) or by startup reconciliation (`refence_cancelled`, before
any worker of the new boot can take the job).
"""

from __future__ import annotations

import enum
import logging

from runtime.errors import BrokerUnavailable
from runtime.keys import hop_key
from runtime.models import Run, RunDelivery, RunStatus
from runtime.retry import retrying
from runtime.seams import Deps, JobInfo, JobStatus

log = logging.getLogger(__name__)

LATE_ABORT_ATTEMPTS = 3
CANCELLED_BEHIND = (RunStatus.CANCELLING, RunStatus.CANCELLED)
"""Run states in which a just-published hop job of the Run's sequence is late."""
WAITING = (JobStatus.NEW, JobStatus.DEFERRED, JobStatus.QUEUED)
"""Job states in which no worker has taken the hop yet."""


class LateJob(enum.StrEnum):
    NOT_LATE = "not_late"
    """The Run was not being cancelled at this sequence: nothing to fence."""
    FENCED = "fenced"
    """The broker acknowledged the abort: the job is gone, aborted or aborting."""
    UNFENCED = "unfenced"
    """No abort was acknowledged: left to the claim CAS, explicit cancellation
    and startup reconciliation."""


def _settled(job: JobInfo | None) -> bool:
    """Absent, finished, or aborting (the worker running it cancels the hop)."""
    return job is None or job.status.finished or job.status is JobStatus.ABORTING


async def _abort_exactly(deps: Deps, key: str) -> LateJob:
    """Abort `key`, re-probing each unacknowledged abort, at most LATE_ABORT_ATTEMPTS times."""
    for _ in range(LATE_ABORT_ATTEMPTS):
        try:
            job = await deps.broker.abort(key, "cancelled: late publish")
        except BrokerUnavailable as exc:  # the abort's acknowledgement is lost: re-probe
            log.warning("abort of late job %s unacknowledged: %s", key, exc)
            try:
                job = await deps.broker.probe(key)
            except BrokerUnavailable:
                continue
        if _settled(job):
            return LateJob.FENCED
    log.error("late job %s of a cancelled Run not fenced after %d aborts; it stays behind the "
              "claim CAS until a cancellation or startup retries the abort",
              key, LATE_ABORT_ATTEMPTS)
    return LateJob.UNFENCED


async def fence_late_job(deps: Deps, delivery: RunDelivery) -> LateJob:
    """Abort `delivery`'s exact hop job if its Run's cancellation began.

    Never raises for broker or ledger errors: they make the result UNFENCED
    (or NOT_LATE when the Run could not even be read, which the relay and a
    repeated cancellation still cover).
    """
    try:
        run = await retrying(deps.entropy, lambda: deps.ledger.get_run(delivery.run_id))
    except Exception as exc:
        log.warning("publish of %s: Run unreadable, late job not fenced: %r", delivery.key, exc)
        return LateJob.NOT_LATE
    if run is None or run.status not in CANCELLED_BEHIND or run.seq != delivery.seq:
        return LateJob.NOT_LATE
    return await _abort_exactly(deps, delivery.key)


async def refence_cancelled(deps: Deps, run: Run) -> LateJob:
    """Startup's retry for a CANCELLED Run: a hop job of its sequence still waiting
    in the queue can only be a late publish whose fence did not happen (its boot
    died first, or every abort failed). Started or finished jobs are left alone:
    an active one of a dead boot is swept, and the claim CAS refuses it anyway."""
    if run.status is not RunStatus.CANCELLED:
        return LateJob.NOT_LATE
    key = hop_key(run.id, run.seq)
    job = await deps.broker.probe(key)
    if job is None or job.status not in WAITING:
        return LateJob.NOT_LATE
    return await _abort_exactly(deps, key)
