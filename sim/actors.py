"""External actors of the simulated world: they outlive every boot.

The agent runtime runs delegated jobs, the orchestrator makes hardware
ready, the approver decides consents and the canceller cancels Runs. Each
draws from the `actors` stream and may be slow, fail, repeat itself or
answer late when the fault plan says so. A boot reaches the agent runtime
and the orchestrator through per-boot proxies that refuse calls from a dead
boot, like every other seam.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from uuid import UUID

import anyio

from runtime.models import AgentJob, AgentJobStatus
from runtime.seams import AgentJobReport
from sim.faults.plan import FaultKind

if TYPE_CHECKING:
    from sim.world import Boot, World

SLOW_OR_FAIL = (FaultKind.ACTOR_FAIL, FaultKind.ACTOR_SLOW)


@dataclass
class _SimJob:
    job: AgentJob
    status: AgentJobStatus
    finish_at: float
    outcome: AgentJobStatus
    visible_at: float


@dataclass
class SimAgentRuntime:
    """A deterministic agent runtime with idempotent submit and lookup by identity."""

    world: World
    jobs: dict[UUID, _SimJob] = field(default_factory=dict)
    submits: Counter[UUID] = field(default_factory=Counter)

    def _fault(self, point: str, kinds: tuple[FaultKind, ...]) -> tuple[FaultKind | None, float]:
        pf = self.world.injector.hit(point, kinds)
        if pf is None:
            return None, 0.0
        self.world.trace.emit("faults", "fault.fired", point=point, fault=pf.fault,
                              amount=pf.amount)
        return pf.fault, pf.amount

    async def submit(self, job: AgentJob) -> None:
        fault, amount = self._fault("actor.agent.submit", SLOW_OR_FAIL)
        if fault is FaultKind.ACTOR_FAIL:
            raise RuntimeError("agent runtime refused the submission")
        self.submits[job.id] += 1
        if job.id in self.jobs:
            return  # adopted: the same job, never a second start
        rng = self.world.streams.actors
        now = anyio.current_time()
        roll = rng.random()
        outcome = (AgentJobStatus.SUCCEEDED if roll < 0.85 else
                   AgentJobStatus.FAILED if roll < 0.95 else AgentJobStatus.LOST)
        finish = now + round(rng.uniform(1.0, 60.0), 3) + amount
        self.jobs[job.id] = _SimJob(job, AgentJobStatus.RUNNING, finish, outcome, finish)
        self.world.trace.emit("agents", "job.started", job=str(job.id), run=str(job.run_id))

    def _settle(self, sim: _SimJob) -> None:
        now = anyio.current_time()
        if sim.status is AgentJobStatus.RUNNING and now >= sim.finish_at:
            sim.status = sim.outcome
            self.world.trace.emit("agents", "job.finished", job=str(sim.job.id),
                                  run=str(sim.job.run_id), status=sim.status)

    async def lookup(self, job_id: UUID) -> AgentJobReport | None:
        fault, amount = self._fault("actor.agent.lookup", (FaultKind.ACTOR_LATE,))
        sim = self.jobs.get(job_id)
        if sim is None:
            return None
        if fault is FaultKind.ACTOR_LATE:
            sim.visible_at = max(sim.visible_at, anyio.current_time() + amount)
        self._settle(sim)
        if sim.status.terminal and anyio.current_time() < sim.visible_at:
            return AgentJobReport(status=AgentJobStatus.RUNNING)
        result = {"answer": f"done:{sim.job.request}"} \
            if sim.status is AgentJobStatus.SUCCEEDED else None
        return AgentJobReport(status=sim.status, result=result)

    async def cancel(self, job_id: UUID) -> bool:
        fault, _ = self._fault("actor.agent.cancel", (FaultKind.ACTOR_FAIL,))
        if fault is FaultKind.ACTOR_FAIL:
            return False
        sim = self.jobs.get(job_id)
        if sim is not None:
            self._settle(sim)
            if not sim.status.terminal or sim.status is AgentJobStatus.LOST:
                sim.status = AgentJobStatus.CANCELLED
                self.world.trace.emit("agents", "job.cancelled", job=str(job_id),
                                      run=str(sim.job.run_id))
        return True

    def lost_jobs_of(self, run_id: UUID) -> list[UUID]:
        """Jobs of the Run that ended LOST and were never asked to stop: LOST is no
        evidence that the process stopped (seed 000, "Delegated work")."""
        return [j for j, s in self.jobs.items()
                if s.job.run_id == run_id and s.status is AgentJobStatus.LOST]

    def live_jobs_of(self, run_id: UUID) -> list[UUID]:
        for sim in self.jobs.values():
            self._settle(sim)
        return [j for j, s in self.jobs.items()
                if s.job.run_id == run_id and s.status is AgentJobStatus.RUNNING]


@dataclass
class SimOrchestrator:
    """Hardware readiness: slow, failing, or quick, per the fault plan."""

    world: World
    calls: dict[UUID, list[str]] = field(default_factory=dict)

    async def converge(self, run_id: UUID, capability: str) -> None:
        self.calls.setdefault(run_id, []).append(capability)
        self.world.checker.on_converge(run_id, self.calls[run_id])
        pf = self.world.injector.hit("actor.orchestrator", SLOW_OR_FAIL)
        if pf is not None:
            self.world.trace.emit("faults", "fault.fired", point="actor.orchestrator",
                                  fault=pf.fault, amount=pf.amount)
        await anyio.sleep(round(self.world.streams.actors.uniform(0.5, 5.0), 3))
        if pf is not None and pf.fault is FaultKind.ACTOR_SLOW:
            await anyio.sleep(pf.amount)
        if pf is not None and pf.fault is FaultKind.ACTOR_FAIL:
            raise RuntimeError(f"{capability} could not be made ready")


class BootAgents:
    def __init__(self, boot: Boot, inner: SimAgentRuntime) -> None:
        self.boot, self.inner = boot, inner

    async def submit(self, job: AgentJob) -> None:
        self.boot.check_alive()
        await self.inner.submit(job)
        self.boot.check_alive()

    async def lookup(self, job_id: UUID) -> AgentJobReport | None:
        self.boot.check_alive()
        return await self.inner.lookup(job_id)

    async def cancel(self, job_id: UUID) -> bool:
        self.boot.check_alive()
        return await self.inner.cancel(job_id)


class BootOrchestrator:
    def __init__(self, boot: Boot, inner: SimOrchestrator) -> None:
        self.boot, self.inner = boot, inner

    async def converge(self, run_id: UUID, capability: str) -> None:
        self.boot.check_alive()
        await self.inner.converge(run_id, capability)
        self.boot.check_alive()
