"""People in the simulated world: an approver who decides consents and an
operator who cancels Runs, both over the process boundary."""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass, field
from uuid import UUID

import anyio

from runtime.errors import LedgerUnavailable, RuntimeEngineError
from runtime.models import ConsentStatus, Run, RunStatus
from runtime.stasis.consent import decide
from sim.faults import struck
from sim.faults.plan import FaultKind
from sim.world import Boot, Unavailable, World

ACTOR_KINDS = (FaultKind.ACTOR_SLOW, FaultKind.ACTOR_DUPLICATE, FaultKind.ACTOR_LATE,
               FaultKind.ACTOR_FAIL)


@dataclass
class Approver:
    """Decides pending consents after a think time; may be late, or repeat a verdict and
    then send the contradicting one."""

    world: World
    decided: set[UUID] = field(default_factory=set)
    not_before: dict[UUID, float] = field(default_factory=dict)
    approve: float = 0.75
    """Share of verdicts that approve (an application's workload may set its own)."""
    contradict: float = 0.0
    """Share of unfaulted verdicts a second screen of the owner answers at the same
    moment with the other answer: two verdicts race for one consent's CAS, and the
    loser must be refused (seed 000, concurrent handlers converge). Zero draws nothing."""

    async def run(self, until: float | None = None) -> None:
        while until is None or anyio.current_time() < until:
            await anyio.sleep(round(self.world.streams.actors.uniform(2.0, 15.0), 3))
            await self.pass_once()

    def pending(self) -> list[UUID]:
        table = self.world.ledger.consent_table
        return [c.id for c in sorted(table.values(), key=lambda c: (c.created_at, c.id))
                if c.status is ConsentStatus.PENDING]

    async def pass_once(self) -> None:
        rng = self.world.streams.actors
        for cid in self.pending():
            now = anyio.current_time()
            if now < self.not_before.setdefault(cid, now + rng.uniform(1.0, 30.0)):
                continue
            pf = self.world.injector.hit("actor.approver", ACTOR_KINDS)
            if pf is not None:
                self.world.trace.emit("faults", "fault.fired", point="actor.approver",
                                      fault=pf.fault, amount=pf.amount)
                if pf.fault in (FaultKind.ACTOR_SLOW, FaultKind.ACTOR_LATE):
                    self.not_before[cid] = now + pf.amount
                    continue
            approve = rng.random() < self.approve
            wrong = pf is not None and pf.fault is FaultKind.ACTOR_FAIL
            times = 2 if pf is not None and pf.fault is FaultKind.ACTOR_DUPLICATE else 1
            if pf is None and self.contradict > 0 and rng.random() < self.contradict:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._decide, cid, approve, False)
                    tg.start_soon(self._decide, cid, not approve, False)
                continue
            for _ in range(times):
                await self._decide(cid, approve, wrong)
            if times == 2:
                # A second screen sends the other answer late: the first verdict won, so
                # the owner's contradicting one is refused (seed 000, concurrent handlers
                # converge). No draw: the RNG streams stay where they were.
                await self._decide(cid, not approve, wrong)

    async def _decide(self, cid: UUID, approve: bool, wrong_principal: bool) -> None:
        consent = self.world.ledger.consent_table[cid]
        principal = "mallory" if wrong_principal else consent.owner
        run = self.world.ledger.run_table.get(consent.run_id)
        parked = run is not None and run.status is RunStatus.AWAITING_CONSENT \
            and run.consent_id == cid
        since = len(self.world.trace.lines)
        try:
            await self.world.request(lambda boot: decide(boot.engine, cid, approve, principal))
            outcome = "decided"
        except (Unavailable, LedgerUnavailable) as exc:
            outcome = type(exc).__name__
        except RuntimeEngineError as exc:
            outcome = type(exc).__name__
        self.world.checker.stasis_checks.verdict_answered(consent, parked, approve, principal,
                                                         outcome, since)
        self.world.trace.emit("approver", "verdict", consent=str(cid), approve=approve,
                              principal=principal, outcome=outcome)


@dataclass
class Operator:
    """Cancels some Runs at random moments."""

    world: World
    share: float = 0.4
    reread: float = 0.0
    """How often a cancel that answered CANCELLED is sent again at once (a caller
    retrying its request): the re-read of an already CANCELLED Run (seed 000,
    "Cancellation, mutation, and recovery"). Zero draws nothing."""
    stale: float = 0.2
    """Share of cancels aimed at any Run, terminal ones included."""
    at_effect: float = 0.3
    """Share of applied effects after which the operator cancels that Run while its hop
    is paused there: the hop then holds an outcome for a Run gone CANCELLING."""

    at_claim: float = 0.0
    """Share of committed claims at which the operator cancels that Run while its hop
    is paused right after the claim: the hop then reaches its nodes, and their
    effects, for a Run gone CANCELLING. Zero draws nothing."""

    async def after_claim(self, run_id: UUID) -> None:
        """Pause here, act, resume: called at the hop's CLAIM_COMMITTED point."""
        if self.at_claim <= 0 or self.world.injector.healed \
                or self.world.streams.actors.random() >= self.at_claim:
            return
        self.world.spawn(self.cancel, run_id)
        await self._until_not_running(run_id)

    async def after_effect(self, run_id: UUID) -> None:
        """Pause here, act, resume: called by the effect sink once an effect applied."""
        if self.world.injector.healed or self.world.streams.actors.random() >= self.at_effect:
            return
        self.world.spawn(self.cancel, run_id)
        await self._until_not_running(run_id)

    async def _until_not_running(self, run_id: UUID) -> None:
        for _ in range(20):  # resume once CANCELLING committed (or after 2 s)
            run = self.world.ledger.run_table.get(run_id)
            if run is None or run.status is not RunStatus.RUNNING:
                return
            await anyio.sleep(0.1)

    async def run(self, until: float) -> None:
        rng = self.world.streams.actors
        while anyio.current_time() < until:
            await anyio.sleep(round(rng.uniform(3.0, 20.0), 3))
            runs = sorted(self.world.ledger.run_table.values(), key=lambda r: (r.created_at, r.id))
            live = [r.id for r in runs
                    if not r.status.terminal and r.status is not RunStatus.CANCELLING]
            if rng.random() < self.stale:
                # A stale screen: cancel a Run that may have finished meanwhile, which
                # must leave terminal truth alone (seed 003 'Truth closes first').
                live = [r.id for r in runs]
            if live and rng.random() < self.share:
                await self.cancel(rng.choice(live))

    def register(self) -> Operator:
        self.world.actors["operator"] = self
        return self

    async def cancel(self, run_id: UUID) -> None:
        since, began = len(self.world.trace.lines), anyio.current_time()
        answered: list[Boot] = []

        def call(boot: Boot) -> Awaitable[Run]:
            answered.append(boot)
            return boot.canceller.cancel(run_id)

        with struck.watching() as faults:  # the faults that strike this very call
            try:
                run = await self.world.request(call)
                outcome = run.status.value
                if run.status is RunStatus.CANCELLED:
                    self.world.checker.event_checks.on_cancelled(run_id, answered[-1])
            except Unavailable as exc:
                outcome = type(exc).__name__
            except RuntimeEngineError as exc:
                outcome = type(exc).__name__
                self.world.checker.on_cancel_refused(run_id, exc)
        if outcome == RunStatus.CANCELLING.value:
            self.world.checker.on_cancel_left_cancelling(run_id, since, began, tuple(faults))
        self.world.trace.emit("operator", "cancel", run=str(run_id), outcome=outcome)
        if outcome == RunStatus.CANCELLED.value and self.reread > 0 and \
                self.world.streams.actors.random() < self.reread:
            await self.reread_cancelled(run_id)

    async def reread_cancelled(self, run_id: UUID) -> None:
        """Cancel an already CANCELLED Run again; the checker then expects its
        terminal Step to exist (unless a fault struck this very call)."""
        since = len(self.world.trace.lines)
        try:
            run = await self.world.request(lambda boot: boot.canceller.cancel(run_id))
            outcome = run.status.value
        except (Unavailable, LedgerUnavailable, RuntimeEngineError) as exc:
            outcome = type(exc).__name__
        self.world.trace.emit("operator", "cancel.reread", run=str(run_id), outcome=outcome)
        if outcome == RunStatus.CANCELLED.value:
            self.world.checker.on_cancel_reread(run_id, since)
