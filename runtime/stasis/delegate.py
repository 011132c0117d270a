"""Refreshing delegated waits (seed 000, "Delegated AgentJob labor").

A Run parked AWAITING_DELEGATE resumes only from a shape-valid terminal
result of exactly the job that owns its wait. A job the agent runtime does
not know (its process-local projection was lost) is adopted again by
idempotent submit; it never gets a second identity.
"""

from __future__ import annotations

import logging

from runtime import faults
from runtime.engine import RunEngine
from runtime.models import AgentJobStatus, Run, RunDelivery, RunStatus
from runtime.seams import AgentJobReport

log = logging.getLogger(__name__)


def shape_valid(report: AgentJobReport) -> bool:
    if not report.status.terminal:
        return False
    if report.status is AgentJobStatus.SUCCEEDED:
        return isinstance(report.result, dict)
    return True


async def refresh_delegate(engine: RunEngine, run: Run) -> RunDelivery | None:
    deps = engine.deps
    if run.status is not RunStatus.AWAITING_DELEGATE or run.agent_job_id is None:
        return None
    job = await deps.ledger.get_agent_job(run.agent_job_id)
    if job is None or deps.agents is None:
        log.error("Run %s waits on agent job %s that cannot be reached", run.id, run.agent_job_id)
        return None
    if not job.status.terminal:
        report = await deps.agents.lookup(job.id)
        if report is None:
            await deps.agents.submit(job)  # adopt: same identity, same request
            return None
        if not shape_valid(report):
            return None
        job = await deps.ledger.record_agent_job(
            job.id, report.status, report.result, deps.clock.now()
        ) or job
    if not job.status.terminal:
        return None
    delivery = await deps.ledger.readmit_after_delegate(run.id, job.id, deps.clock.now())
    if delivery is None:
        return None
    await deps.faults.point(faults.READMIT_COMMITTED, run_id=run.id)
    return await engine.publish(delivery)
