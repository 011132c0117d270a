"""Cancellation that reports CANCELLED only after containment.

Seed 000_81a5c720b14d934a.txt, "Cancellation, mutation, and recovery": one
process-local writer is elected per Run (a fast path: with several Vessels on
one database the ledger decides, since `begin_cancel` and `finish_cancel` lock
the Run's row and are conditional on its state, so CANCELLED commits once and
its terminal Step is written once whichever process cancels; issue 15, M11);
the writer commits CANCELLING (freezing the
delivery generation: nothing QUEUED at that sequence can be claimed any
more), fences the broker's parent job first, then sweeps correlated agent
jobs, service attempts and pending consents. Only when every one
acknowledged containment does `finish_cancel` expose CANCELLED and settle
the delivery. Anything short of
that leaves an honest, retryable CANCELLING. Stasis is deleted, best effort,
only after CANCELLED committed. A Run that completed first makes cancellation
a no-op; re-reading a CANCELLED Run repeats the sweep, then repairs a
missing terminal Step itself and retries the cleanup.
"""

from __future__ import annotations

import logging
from contextlib import suppress
from dataclasses import dataclass, field
from uuid import UUID

import anyio

from runtime import faults
from runtime.errors import BrokerUnavailable, NotFound
from runtime.events.bus import EventBus
from runtime.events.errors import EventError
from runtime.events.model import EventKind
from runtime.events.repair import write_or_owe
from runtime.keys import hop_key
from runtime.models import AgentJobStatus, ConsentStatus, Run, RunStatus
from runtime.seams import Deps, JobStatus
from runtime.service.attempts import cancel as cancel_attempt
from runtime.service.errors import ServiceError
from runtime.sessions import KeyedLocks

log = logging.getLogger(__name__)

ABORT_ATTEMPTS = 3
ACK_TIMEOUT_S = 10.0
ACK_POLL_S = 0.5


@dataclass
class Canceller:
    deps: Deps
    bus: EventBus | None = None
    evidence_debt: dict[UUID, int] | None = None
    """Where a terminal Step that could not be written is owed (the worker's debts)."""
    elections: KeyedLocks = field(default_factory=KeyedLocks)

    async def cancel(self, run_id: UUID) -> Run:
        """Cancel a Run; returns it CANCELLED, still CANCELLING, or already terminal."""
        async with self.elections.hold(str(run_id)):
            ledger, now = self.deps.ledger, self.deps.clock.now
            run = await ledger.begin_cancel(run_id, now())
            if run is None:
                raise NotFound("Run", run_id)
            if run.status is RunStatus.CANCELLED:
                return await self._reread(run)
            if run.status.terminal:
                return run  # completion won the race: nothing to cancel
            await self.deps.faults.point(faults.CANCEL_CANCELLING_COMMITTED, run_id=run_id)
            if not await self.contain(run):
                return run
            await self.deps.faults.point(faults.CANCEL_CONTAINED, run_id=run_id)
            done = await ledger.finish_cancel(run_id, run.seq, now())
            if done is None:
                return (await ledger.get_run(run_id)) or run
            await self._evidence(done)
            await self._cleanup(done)
            return done

    async def _reread(self, run: Run) -> Run:
        """An already CANCELLED Run: the child/consent sweep again, then its
        missing terminal Step (written here, exactly once, not left to the
        relay), then the checkpoint deletion it may still owe (seed 000,
        "Cancellation, mutation, and recovery")."""
        await self.contain(run)  # truth already stands; the sweep is repeated
        await self._evidence(run)
        await self._cleanup(run)
        return run

    async def _cleanup(self, run: Run) -> None:
        """Best-effort stasis deletion, only once CANCELLED has committed."""
        try:
            await self.deps.ledger.delete_checkpoint(run.id)
        except Exception as exc:  # a re-read of the Run or startup's paging retries it
            log.warning("cancel of %s: checkpoint not deleted: %r", run.id, exc)

    async def _evidence(self, run: Run) -> None:
        """After terminal truth: the terminal Step, then any live channel closes.

        The canceller writes the one `run.cancelled` Step itself (`write_or_owe`
        skips it when it already landed). A hop whose Step writer is still
        attached to the channel must not tee a second one: the writer is
        detached before the terminal event goes to live readers (seed 000,
        "Events, settlement, and waits": terminal evidence exactly once)."""
        await write_or_owe(self.deps, run, self.evidence_debt)
        if self.bus is not None:
            channel = self.bus.get(run.id)
            if channel is not None and not channel.closed:
                channel.attach(None)  # live readers only: the Step is written above
                with suppress(EventError):
                    await channel.publish(EventKind.RUN_CANCELLED, {})
                await self.bus.close(run.id)

    async def contain(self, run: Run) -> bool:
        """Fence the parent job, then every correlated child; True when all acknowledged."""
        if not await self._fence_parent(run):
            return False
        return await self.contain_children(run)

    async def contain_children(self, run: Run) -> bool:
        """Agent jobs, service attempts and pending consents of the Run; True
        when all acknowledged."""
        if not await self._contain_agent_jobs(run):
            return False
        if not await self._contain_service_attempts(run):
            return False
        for consent in await self.deps.ledger.consents_of(run.id):
            if consent.status is ConsentStatus.PENDING:
                await self.deps.ledger.cancel_consent(consent.id, self.deps.clock.now())
        return True

    async def _fence_parent(self, run: Run) -> bool:
        key = hop_key(run.id, run.seq)
        broker = self.deps.broker
        for _ in range(ABORT_ATTEMPTS):
            job = await broker.probe(key)
            if job is None or job.status.finished:
                return True
            if job.status is not JobStatus.ABORTING:
                # Never re-abort an aborting job: SAQ's abort refreshes its heartbeat,
                # so repeating it would keep a dead boot's job from ever being swept.
                try:
                    await broker.abort(key, "cancelled")
                except BrokerUnavailable as exc:  # acknowledgement lost: re-probe, retry
                    log.warning("abort of %s unacknowledged: %s", key, exc)
                    continue
            if await self._acknowledged(key):
                return True
        log.warning("cancel of %s: broker job %s did not acknowledge its abort", run.id, key)
        return False

    async def _acknowledged(self, key: str) -> bool:
        with anyio.move_on_after(ACK_TIMEOUT_S):
            while True:
                job = await self.deps.broker.probe(key)
                if job is None or job.status.finished:
                    return True
                await anyio.sleep(ACK_POLL_S)
        return False

    async def _contain_agent_jobs(self, run: Run) -> bool:
        agents = self.deps.agents
        for job in await self.deps.ledger.agent_jobs_of(run.id):
            if job.status.terminal and job.status is not AgentJobStatus.LOST:
                continue
            if agents is None or not await agents.cancel(job.id):
                return False
            await self.deps.ledger.record_agent_job(
                job.id, AgentJobStatus.CANCELLED, None, self.deps.clock.now()
            )
        return True

    async def _contain_service_attempts(self, run: Run) -> bool:
        """Every open attempt the Run owns must end proven terminal: a PREPARED
        one settles CANCELLED unsent, the rest ask their exact provider job."""
        services = self.deps.services
        if services is None:
            return True
        for attempt in await services.store.owned_by(run.id):
            if attempt.state.terminal:
                continue
            try:
                after = await cancel_attempt(services, attempt.id)
            except ServiceError as exc:
                log.warning("cancel of %s: service attempt %s refused: %r", run.id, attempt.id,
                            exc)
                return False
            if not after.state.terminal:
                return False
        return True
