"""Pausing a hop: durable consent and delegate parks, live hardware waits.

Seed 003 ("Three boundaries", "What crosses the threshold") and seed 000
("Events, settlement, and waits"). Durable parks follow one order: the wait
owner's identity first, then the checkpoint naming it, then the owner row,
then one transaction that verifies both and parks the Run while settling the
claimed delivery. A crash between any two steps leaves a state startup can
classify. A hardware wait keeps the hop: checkpoint, AWAITING_HARDWARE, a
bounded orchestrator call, back to RUNNING, and the state is re-read from
the checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import anyio
from pydantic import BaseModel, ValidationError

from runtime import faults
from runtime.graph.budget import HardwareBudgetExhausted, HardwareState
from runtime.graph.records import checkpoint_record
from runtime.graph.snapshots import Checkpoint, NodeSnapshot, SnapshotStatus
from runtime.graph.transitions import AwaitConsent, AwaitDelegate, AwaitService, NeedHardware
from runtime.hop import HopContext
from runtime.models import AgentJob, Consent, RunStatus, Settlement
from runtime.registry import Pattern
from runtime.retry import retrying
from runtime.stasis import service

MAX_CONSENT_ROUNDS = 3
HARDWARE_TIMEOUT_S = 60.0
SEVERAL_APPROVALS = "bottleneck: several approvals requested in one round; none was asked"
CHAIN_LIMIT = f"bottleneck: approval chain limit of {MAX_CONSENT_ROUNDS} rounds reached"


@dataclass(frozen=True)
class Parked:
    """The hop released its worker; the Run waits (or moved elsewhere, when fenced)."""

    status: RunStatus | None
    fenced: bool = False


FENCED = Parked(status=None, fenced=True)


class ResumeRefused(Exception):
    """The wait that resumed this hop is not the decided/terminal owner it must be."""


@dataclass
class Waits:
    ctx: HopContext
    pattern: Pattern
    checkpoint: Checkpoint

    # -- resuming ------------------------------------------------------------

    async def context_for(self, snap: NodeSnapshot) -> HopContext:
        ledger, run = self.ctx.deps.ledger, self.ctx.run
        if snap.consent_id is not None:
            consent = await ledger.get_consent(snap.consent_id)
            if consent is None or consent.id != run.consent_id or not consent.status.decided:
                raise ResumeRefused(f"consent {snap.consent_id} is not this Run's decided owner")
            return self.ctx.resumed_with(consent=consent)
        if snap.agent_job_id is not None:
            job = await ledger.get_agent_job(snap.agent_job_id)
            if job is None or job.id != run.agent_job_id or not job.status.terminal:
                raise ResumeRefused(f"agent job {snap.agent_job_id} is not a terminal owner")
            return self.ctx.resumed_with(agent_job=job)
        if snap.service_attempt_id is not None:
            attempt = await service.terminal_owner(self.ctx.deps, run, snap.service_attempt_id)
            if attempt is None:
                raise ResumeRefused(
                    f"service attempt {snap.service_attempt_id} is not a terminal owner"
                )
            return self.ctx.resumed_with(service_attempt=attempt)
        return self.ctx

    # -- durable parks ----------------------------------------------------------

    async def consent(self, state: Any, t: AwaitConsent) -> Settlement | Parked:
        if t.approvals != 1:
            return Settlement(status=RunStatus.DONE, result={"bottleneck": SEVERAL_APPROVALS})
        if self.checkpoint.consent_rounds() >= MAX_CONSENT_ROUNDS:
            return Settlement(status=RunStatus.DONE, result={"bottleneck": CHAIN_LIMIT})
        deps, run = self.ctx.deps, self.ctx.run
        consent_id = deps.entropy.new_id()
        if not await self._save(self._pending(t.then, state, consent_id=consent_id)):
            return FENCED
        await deps.faults.point(faults.CONSENT_CHECKPOINT_SAVED, run_id=run.id)
        row = Consent(id=consent_id, run_id=run.id, seq=self.ctx.seq, node=t.then,
                      prompt=t.prompt, owner=run.intent.sigil, created_at=deps.clock.now())
        if await deps.ledger.create_consent(row) is None:
            return FENCED
        await deps.faults.point(faults.CONSENT_ROW_SAVED, run_id=run.id)
        parked = await deps.ledger.park_consent(run.id, self.ctx.seq, consent_id, deps.clock.now())
        return Parked(RunStatus.AWAITING_CONSENT) if parked else FENCED

    async def delegate(self, state: Any, t: AwaitDelegate) -> Settlement | Parked:
        deps, run = self.ctx.deps, self.ctx.run
        if deps.agents is None:
            return Settlement(status=RunStatus.FAILED, error="no agent runtime is configured")
        job_id = deps.entropy.new_id()
        if not await self._save(self._pending(t.then, state, agent_job_id=job_id)):
            return FENCED
        await deps.faults.point(faults.DELEGATE_CHECKPOINT_SAVED, run_id=run.id)
        now = deps.clock.now()
        job = AgentJob(id=job_id, run_id=run.id, seq=self.ctx.seq, node=t.then,
                       request=t.request, created_at=now, updated_at=now)
        if await deps.ledger.create_agent_job(job) is None:
            return FENCED
        await deps.agents.submit(job)
        await deps.faults.point(faults.DELEGATE_SUBMITTED, run_id=run.id)
        parked = await deps.ledger.park_delegate(run.id, self.ctx.seq, job_id, deps.clock.now())
        return Parked(RunStatus.AWAITING_DELEGATE) if parked else FENCED

    async def service(self, state: Any, t: AwaitService) -> Settlement | Parked:
        """Checkpoint, attempt, park, then send: see `runtime.stasis.service`."""
        deps, run, seq = self.ctx.deps, self.ctx.run, self.ctx.seq
        if deps.services is None:
            return Settlement(status=RunStatus.FAILED, error="no service provider is configured")
        attempt_id = deps.entropy.new_id()
        if not await self._save(self._pending(t.then, state, service_attempt_id=attempt_id)):
            return FENCED
        await deps.faults.point(faults.SERVICE_CHECKPOINT_SAVED, run_id=run.id)
        # prepare is idempotent for the same attempt: a storage blip is retried,
        # never turned into a FAILED Run (issue M11).
        attempt = service.attempt_for(deps, run, seq, attempt_id, t)
        store = deps.services.store
        await retrying(deps.entropy, lambda: store.prepare(attempt))
        if await deps.ledger.park_service(run.id, seq, attempt_id, deps.clock.now()) is None:
            return FENCED  # the PREPARED attempt was never sent; containment settles it
        await deps.faults.point(faults.SERVICE_PARKED, run_id=run.id)
        await service.send(deps.services, attempt_id)
        return Parked(RunStatus.AWAITING_SERVICE)

    # -- live hardware wait -------------------------------------------------------

    async def hardware(self, state: Any, t: NeedHardware) -> Any:
        """The state to continue with, or the Settlement/Parked that ends the hop."""
        deps, run, seq = self.ctx.deps, self.ctx.run, self.ctx.seq
        if not isinstance(state, HardwareState):
            return Settlement(status=RunStatus.FAILED, error="this state cannot request hardware")
        try:
            budget = state.hardware_resume_budget.charge(t.capability)
        except HardwareBudgetExhausted as exc:
            return Settlement(status=RunStatus.FAILED, error=str(exc))
        if deps.orchestrator is None:
            return Settlement(status=RunStatus.FAILED, error="no orchestrator is configured")
        state = state.model_copy(update={"hardware_resume_budget": budget})
        snap = self._pending(t.then, state)
        if not await self._save(snap):
            return FENCED
        if await deps.ledger.await_hardware(run.id, seq, deps.clock.now()) is None:
            return FENCED
        await deps.faults.point(faults.HARDWARE_AWAITING, run_id=run.id)
        failure = await self._converge(t.capability)
        with anyio.CancelScope(shield=True):
            back = await deps.ledger.resume_hardware(run.id, seq, deps.clock.now())
        if back is None:
            return FENCED
        if failure is not None:
            return Settlement(status=RunStatus.FAILED, error=failure)
        snap.status = SnapshotStatus.SUCCESS
        return await self._reload(state)

    async def _converge(self, capability: str) -> str | None:
        orchestrator = self.ctx.deps.orchestrator
        assert orchestrator is not None
        try:
            with anyio.fail_after(HARDWARE_TIMEOUT_S):
                await orchestrator.converge(self.ctx.run.id, capability)
        except TimeoutError:
            return f"hardware {capability!r} not ready within {HARDWARE_TIMEOUT_S:g}s"
        except Exception as exc:
            return f"hardware {capability!r} unavailable: {exc}"
        return None

    async def _reload(self, fallback: BaseModel) -> Any:
        """Resume from persistence: the state as the checkpoint holds it."""
        record = await self.ctx.deps.ledger.load_checkpoint(self.ctx.run.id)
        if record is None:
            return Settlement(status=RunStatus.FAILED, error="stasis lost")
        try:
            saved = Checkpoint.model_validate(record.document)
            pending = [s for s in saved.history if isinstance(s, NodeSnapshot)]
            return self.pattern.decode(pending[-1].state) if pending else fallback
        except ValidationError as exc:
            return Settlement(status=RunStatus.FAILED, error=f"invalid checkpoint: {exc}")

    # -- shared ------------------------------------------------------------------

    def _pending(self, node: str, state: Any, **binding: Any) -> NodeSnapshot:
        snap = NodeSnapshot(node=node, state=self.pattern.encode(state),
                            status=SnapshotStatus.PENDING, run_id=self.ctx.run.id, **binding)
        self.checkpoint.history.append(snap)
        return snap

    async def _save(self, snap: NodeSnapshot) -> bool:
        self.ctx.stasis.saving = True  # before the write: an ambiguous commit may land it
        return await self.ctx.deps.ledger.save_checkpoint(
            checkpoint_record(self.ctx, self.checkpoint)
        )
