"""MemoryLedger: the Ledger seam in process memory.

Every method is one atomic transaction: it checks, then applies all of its
writes with no await in between, so a concurrent caller sees either none or
all of them. `snapshot()`/`restore()` copy the whole state (records are
immutable, so copying the containers is enough).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar
from uuid import UUID

from runtime.adapters import open_run, settle_rule
from runtime.adapters.memory.boots import BootLease, BootsMixin
from runtime.adapters.memory.fresh import hands_back_fresh
from runtime.adapters.memory.gate import enter
from runtime.adapters.memory.service_store import MemoryServiceStore
from runtime.adapters.memory.waits import WaitsMixin
from runtime.events.model import TERMINAL_KINDS
from runtime.models import (
    Admission,
    AgentJob,
    CheckpointRecord,
    Claim,
    Consent,
    DeliveryState,
    LedgerDump,
    Run,
    RunDelivery,
    RunStatus,
    Settlement,
    Step,
)

CLAIMABLE = (DeliveryState.PENDING, DeliveryState.PUBLISHED)


@dataclass(frozen=True)
class MemorySnapshot:
    runs: dict[UUID, Run]
    deliveries: dict[tuple[UUID, int], RunDelivery]
    steps: dict[UUID, list[Step]]
    consents: dict[UUID, Consent]
    agent_jobs: dict[UUID, AgentJob]
    checkpoints: dict[UUID, CheckpointRecord]
    boots: dict[str, BootLease] = field(default_factory=dict)
    late_fences: set[UUID] = field(default_factory=set)


@dataclass
class MemoryLedger(WaitsMixin, BootsMixin):
    run_table: dict[UUID, Run] = field(default_factory=dict)
    delivery_table: dict[tuple[UUID, int], RunDelivery] = field(default_factory=dict)
    step_log: dict[UUID, list[Step]] = field(default_factory=dict)
    consent_table: dict[UUID, Consent] = field(default_factory=dict)
    agent_job_table: dict[UUID, AgentJob] = field(default_factory=dict)
    checkpoint_table: dict[UUID, CheckpointRecord] = field(default_factory=dict)
    late_fence_owed: set[UUID] = field(default_factory=set)
    """CANCELLED Runs whose late hop job startup has not probed yet."""
    services: MemoryServiceStore = field(default_factory=MemoryServiceStore)
    boot_table: dict[str, BootLease] = field(default_factory=dict)

    # -- whole-state copies -------------------------------------------------

    def snapshot(self) -> MemorySnapshot:
        return MemorySnapshot(
            dict(self.run_table),
            dict(self.delivery_table),
            {k: list(v) for k, v in self.step_log.items()},
            dict(self.consent_table),
            dict(self.agent_job_table),
            dict(self.checkpoint_table),
            dict(self.boot_table),
            set(self.late_fence_owed),
        )

    def restore(self, snap: MemorySnapshot) -> None:
        self.run_table = dict(snap.runs)
        self.delivery_table = dict(snap.deliveries)
        self.step_log = {k: list(v) for k, v in snap.steps.items()}
        self.consent_table = dict(snap.consents)
        self.agent_job_table = dict(snap.agent_jobs)
        self.checkpoint_table = dict(snap.checkpoints)
        self.boot_table = dict(snap.boots)
        self.late_fence_owed = set(snap.late_fences)

    # -- admission ----------------------------------------------------------

    @hands_back_fresh
    async def admit_run(
        self, run: Run, delivery: RunDelivery, *, fence_session: bool = True
    ) -> Admission:
        await enter()
        existing = self.run_table.get(run.id)
        if existing is not None:
            return Admission(
                run=existing, delivery=self.delivery_table[(run.id, existing.seq)], created=False
            )
        if delivery.run_id != run.id or delivery.seq != run.seq:
            raise ValueError("delivery must be the Run's current generation")
        if fence_session and run.session is not None:
            busy = self._session_busy(run)
            if busy is not None:
                return Admission(run=run, delivery=delivery, created=False, busy=busy)
        self.run_table[run.id] = run
        self.delivery_table[(run.id, delivery.seq)] = delivery
        return Admission(run=run, delivery=delivery, created=True)

    def _session_busy(self, run: Run) -> Run | None:
        """The session's first other nonterminal Run by (created_at, id); no
        await: part of the admitting transaction."""
        busy = [
            r for r in self.run_table.values()
            if r.session == run.session and r.id != run.id and not r.status.terminal
        ]
        return min(busy, key=lambda r: (r.created_at, r.id), default=None)

    @hands_back_fresh
    async def get_run(self, run_id: UUID) -> Run | None:
        await enter()
        return self.run_table.get(run_id)

    @hands_back_fresh
    async def get_delivery(self, run_id: UUID, seq: int) -> RunDelivery | None:
        await enter()
        return self.delivery_table.get((run_id, seq))

    @hands_back_fresh
    async def deliveries(self, run_id: UUID) -> list[RunDelivery]:
        await enter()
        return sorted(
            (d for (rid, _), d in self.delivery_table.items() if rid == run_id), key=lambda d: d.seq
        )

    @hands_back_fresh
    async def release_held(self, run_id: UUID, seq: int, now: datetime) -> RunDelivery | None:
        await enter()
        d = self.delivery_table.get((run_id, seq))
        if d is None or d.state is not DeliveryState.HELD:
            return d
        return self._put_delivery(d, state=DeliveryState.PENDING, held_by=None, updated_at=now)

    @hands_back_fresh
    async def fail_held(
        self, run_id: UUID, seq: int, reason: str, now: datetime
    ) -> RunDelivery | None:
        await enter()
        d = self.delivery_table.get((run_id, seq))
        if d is None or d.state is not DeliveryState.HELD:
            return d
        run = self.run_table[run_id]
        if run.status is RunStatus.QUEUED and run.seq == seq:
            self._put_run(run, status=RunStatus.FAILED, error=reason, updated_at=now)
        return self._put_delivery(d, state=DeliveryState.FAILED, updated_at=now)

    @hands_back_fresh
    async def mark_published(self, run_id: UUID, seq: int, now: datetime) -> RunDelivery | None:
        await enter()
        d = self.delivery_table.get((run_id, seq))
        if d is None or d.state is not DeliveryState.PENDING:
            return d
        run = self.run_table.get(run_id)
        if run is None or run.status is not RunStatus.QUEUED or run.seq != seq:
            return d  # the acknowledgement lost to a cancellation: still PENDING
        return self._put_delivery(d, state=DeliveryState.PUBLISHED, updated_at=now)

    # -- claim and settlement -----------------------------------------------

    @hands_back_fresh
    async def claim_delivery(
        self, run_id: UUID, seq: int, boot_id: str, token: str, now: datetime
    ) -> Claim:
        await enter()
        run = self.run_table.get(run_id)
        d = self.delivery_table.get((run_id, seq))
        if d is not None and d.state is DeliveryState.CLAIMED and d.claim_token == token:
            return Claim(claimed=True, run=run, delivery=d)  # our own earlier claim
        if (
            run is None
            or d is None
            or run.status is not RunStatus.QUEUED
            or run.seq != seq
            or d.state not in CLAIMABLE
        ):
            return Claim(claimed=False, run=run, delivery=d)
        run = self._put_run(
            run, status=RunStatus.RUNNING, started_at=run.started_at or now, updated_at=now
        )
        d = self._put_delivery(
            d, state=DeliveryState.CLAIMED, claimed_boot=boot_id, claim_token=token, updated_at=now
        )
        return Claim(claimed=True, run=run, delivery=d)

    @hands_back_fresh
    async def settle_run(
        self,
        run_id: UUID,
        seq: int,
        settlement: Settlement,
        now: datetime,
        step: tuple[str, dict[str, Any]] | None = None,
        before: Sequence[tuple[str, dict[str, Any]]] = (),
    ) -> Run | None:
        steps = settle_rule.check_steps(step, before)
        await enter()
        run = self.run_table.get(run_id)
        d = self.delivery_table.get((run_id, seq))
        verdict = settle_rule.decide(run, d, seq, settlement)
        if verdict is settle_rule.Verdict.FENCED:
            return None
        assert run is not None and d is not None
        if verdict is settle_rule.Verdict.APPLY:
            run = self._put_run(
                run,
                status=settlement.status,
                result=settlement.result,
                error=settlement.error,
                updated_at=now,
            )
            self._put_delivery(d, state=DeliveryState.SETTLED, updated_at=now)
        # REPEATED: the same settlement, repeated after an ambiguous commit
        self._settlement_steps(run_id, seq, steps, now)
        return run

    def _settlement_steps(
        self, run_id: UUID, seq: int, steps: Sequence[tuple[str, dict[str, Any]]], now: datetime
    ) -> None:
        """settle_run's Steps, in its transaction (no await): all written, at the
        Run's next indexes, unless the Run has a terminal Step already."""
        if not steps:
            return
        log = self._step_log_of(run_id)  # the Run exists: it was just settled
        if self._terminal_step(log) is not None:
            return
        for kind, data in steps:
            log.append(Step(run_id=run_id, index=len(log), seq=seq, kind=kind, data=data,
                            created_at=now))

    # -- recovery -----------------------------------------------------------

    @hands_back_fresh
    async def rotate_delivery(self, run_id: UUID, seq: int, now: datetime) -> RunDelivery | None:
        await enter()
        run = self.run_table.get(run_id)
        d = self.delivery_table.get((run_id, seq))
        if (
            run is None
            or d is None
            or run.status is not RunStatus.QUEUED
            or run.seq != seq
            or d.state not in CLAIMABLE
        ):
            return None
        self._put_delivery(d, state=DeliveryState.FAILED, updated_at=now)
        fresh = d.next_generation(now)
        self.delivery_table[(run_id, seq + 1)] = fresh
        self._put_run(run, seq=seq + 1, updated_at=now)
        return fresh

    @hands_back_fresh
    async def fail_orphan(
        self, run_id: UUID, seq: int, boot_id: str, reason: str, now: datetime
    ) -> Run | None:
        await enter()
        return self._fail_open(run_id, seq, reason, now, open_run.OrphanFence(boot_id))

    @hands_back_fresh
    async def fail_abandoned(
        self, run_id: UUID, seq: int, claim_token: str, reason: str, now: datetime
    ) -> Run | None:
        await enter()
        return self._fail_open(run_id, seq, reason, now, open_run.AbandonedFence(claim_token))

    def _fail_open(
        self, run_id: UUID, seq: int, reason: str, now: datetime, fence: open_run.ClaimFence
    ) -> Run | None:
        """The Run and its delivery FAILED when `open_run.decide` says so, in one step."""
        run = self.run_table.get(run_id)
        d = self.delivery_table.get((run_id, seq))
        verdict = open_run.decide(run, d, seq, reason, fence)
        if verdict is not open_run.Verdict.FAIL:
            return run if verdict is open_run.Verdict.REPEATED else None
        assert run is not None and d is not None
        run = self._put_run(run, status=RunStatus.FAILED, error=reason, updated_at=now)
        self._put_delivery(d, state=DeliveryState.FAILED, updated_at=now)
        return run

    # -- queries --------------------------------------------------------------

    @hands_back_fresh
    async def runs_in_session(self, session: str, limit: int) -> list[Run]:
        await enter()
        found = [
            r for r in self.run_table.values() if r.session == session and not r.status.terminal
        ]
        return sorted(found, key=lambda r: (r.created_at, r.id))[:limit]

    @hands_back_fresh
    async def page_runs(
        self,
        statuses: Sequence[RunStatus],
        after: tuple[datetime, UUID] | None,
        limit: int,
    ) -> list[Run]:
        await enter()
        wanted = set(statuses)
        found = [
            r
            for r in self.run_table.values()
            if r.status in wanted and (after is None or (r.updated_at, r.id) > after)
        ]
        return sorted(found, key=lambda r: (r.updated_at, r.id))[:limit]

    @hands_back_fresh
    async def evidence_debts(self, after: tuple[datetime, UUID] | None, limit: int) -> list[Run]:
        await enter()
        found = [
            r for r in self.run_table.values()
            if r.status.terminal and (after is None or (r.updated_at, r.id) > after)
            and not any(s.kind in TERMINAL_KINDS for s in self.step_log.get(r.id, ()))
        ]
        return sorted(found, key=lambda r: (r.updated_at, r.id))[:limit]

    @hands_back_fresh
    async def late_fence_debts(
        self, after: tuple[datetime, UUID] | None, limit: int
    ) -> list[Run]:
        await enter()
        found = [
            r for rid in self.late_fence_owed if (r := self.run_table.get(rid)) is not None
            and (after is None or (r.updated_at, r.id) > after)
        ]
        return sorted(found, key=lambda r: (r.updated_at, r.id))[:limit]

    async def settle_late_fence(self, run_id: UUID) -> bool:
        await enter()
        if run_id not in self.late_fence_owed:
            return False
        self.late_fence_owed.discard(run_id)
        return True

    @hands_back_fresh
    async def append_step(
        self, run_id: UUID, seq: int, kind: str, data: dict[str, Any], now: datetime
    ) -> Step:
        """Append one Step. The Run's terminal Step closes its log: any Step after it
        (a second terminal one, or a late Step of a hop fenced out meanwhile) is
        refused, nothing is written, and the terminal Step is returned instead."""
        await enter()
        log = self._step_log_of(run_id)
        if (written := self._terminal_step(log)) is not None \
                and (kind in TERMINAL_KINDS or self.closes_at_terminal):
            return written
        step = Step(run_id=run_id, index=len(log), seq=seq, kind=kind, data=data, created_at=now)
        log.append(step)
        return step

    @hands_back_fresh
    async def append_steps(
        self, run_id: UUID, seq: int, items: Sequence[tuple[str, dict[str, Any]]], now: datetime
    ) -> list[Step]:
        """Append `items` in order as consecutive Steps in one transaction. Items
        are dropped once the Run has a terminal Step (written before, or earlier in
        this group): it closes the log. The Steps returned are the ones written."""
        await enter()
        if not items:
            return []
        log = self._step_log_of(run_id)
        steps: list[Step] = []
        for kind, data in items:
            if (kind in TERMINAL_KINDS or self.closes_at_terminal) \
                    and self._terminal_step(log) is not None:
                continue
            step = Step(run_id=run_id, index=len(log), seq=seq, kind=kind, data=data,
                        created_at=now)
            log.append(step)
            steps.append(step)
        return steps

    def _step_log_of(self, run_id: UUID) -> list[Step]:
        """The Run's Step log; LookupError when no such Run was admitted (a Step
        names an admitted Run, as in the PostgreSQL adapter). No await: it is
        part of the caller's transaction."""
        if run_id not in self.run_table:
            raise LookupError(f"no Run {run_id}: a Step names an admitted Run")
        return self.step_log.setdefault(run_id, [])

    closes_at_terminal: ClassVar[bool] = True
    """A terminal Step closes the Run's log to every later Step (zombie hops: issue 18)."""

    def _terminal_step(self, log: Sequence[Step]) -> Step | None:
        """The Run's terminal Step if one is written: the guard that keeps a Run to
        one terminal Step whoever writes it (two boots may both fail an orphan and
        both write its evidence; issue 15, M11). No await: it is part of the
        caller's transaction."""
        return next((s for s in log if s.kind in TERMINAL_KINDS), None)

    @hands_back_fresh
    async def steps(self, run_id: UUID) -> list[Step]:
        await enter()
        return list(self.step_log.get(run_id, []))

    async def dump(self) -> LedgerDump:
        return self.dump_now()

    def dump_now(self) -> LedgerDump:
        """Synchronous dump, for checkers that run between transactions."""
        runs = sorted(self.run_table.values(), key=lambda r: (r.created_at, r.id))
        deliveries = sorted(self.delivery_table.values(), key=lambda d: (str(d.run_id), d.seq))
        steps = [s for rid in sorted(self.step_log, key=str) for s in self.step_log[rid]]
        return LedgerDump(
            runs=runs,
            deliveries=deliveries,
            steps=steps,
            consents=sorted(self.consent_table.values(), key=lambda c: (c.created_at, c.id)),
            agent_jobs=sorted(self.agent_job_table.values(), key=lambda j: (j.created_at, j.id)),
            checkpoints=sorted(self.checkpoint_table.values(), key=lambda c: str(c.run_id)),
        )
