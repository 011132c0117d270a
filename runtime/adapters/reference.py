"""Deterministic, effect-free reference adapters for delegated labour and
hardware readiness (seed 000, "Delegated AgentJob labor").

The agent runtime keeps a process-local projection of results rebuilt from
the persisted request: a lost projection is simply rebuilt on the next
submit, so adopting a job never repeats an effect (there is none).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from uuid import UUID

from runtime.models import AgentJob, AgentJobStatus
from runtime.seams import AgentJobReport


@dataclass
class ReferenceAgentRuntime:
    jobs: dict[UUID, AgentJobReport] = field(default_factory=dict)

    async def submit(self, job: AgentJob) -> None:
        if job.id not in self.jobs:
            result = {"answer": job.request, "job": str(job.id)}
            self.jobs[job.id] = AgentJobReport(status=AgentJobStatus.SUCCEEDED, result=result)

    async def lookup(self, job_id: UUID) -> AgentJobReport | None:
        return self.jobs.get(job_id)

    async def cancel(self, job_id: UUID) -> bool:
        report = self.jobs.get(job_id)
        if report is not None and not report.status.terminal:
            self.jobs[job_id] = AgentJobReport(status=AgentJobStatus.CANCELLED)
        return True


class ReferenceOrchestrator:
    async def converge(self, run_id: UUID, capability: str) -> None:
        return None
