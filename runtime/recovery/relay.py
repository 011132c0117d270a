"""Maintenance relays: after startup, repeat bounded recovery.

Seed 000 ("Cancellation, mutation, and recovery"): the delivery relay finds
QUEUED Runs whose publication failed, whose acknowledgement was lost, or
whose broker job died with an earlier boot; the consent and delegated-wait
relays re-fire verdicts and terminal jobs committed after an earlier clean
probe; the service relay sends a parked attempt still PREPARED, reconciles
the rest by lookup and re-admits once one is proven terminal; CANCELLING
Runs get their containment retried, and orphans of an earlier boot whose
containment failed at startup are retried too (hops of this boot are
recognised by their claim and left alone while the worker still runs them;
one whose hop is gone because a sweep aborted its job is recovered like an
orphan), and checkpoints of terminal Runs
whose best-effort deletion failed are deleted again. Each uses the same
code as startup; a QUEUED Run whose delivery truth degraded the pass (missing
or mismatched row, active job without a trustworthy start) keeps its page in
the revisit queue until it recovers. Exceptions are isolated per Run within a pass.

With a boot lease (several Vessels on one database, issue 15) the relay also
pays the ledger's recorded terminal-evidence debts, one page a pass: a boot
that died between a Run's terminal truth and its Step is not always followed
by a restart whose startup would pay it (a zombie's successor is already
serving). Only debts older than a lease are taken, so a live hop of another
boot writes its own Step first; the ledger's refusal of a second terminal
Step keeps the repair exactly once even if it does not.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from uuid import UUID

import anyio

from runtime.cancel import Canceller
from runtime.engine import RunEngine
from runtime.events.repair import repair_terminal_evidence
from runtime.models import Run, RunStatus
from runtime.recovery.boot_lease import BootLeaseKeeper
from runtime.recovery.cleanup import pay_cleanup_debt
from runtime.recovery.deliveries import DeliveryRecovery, DeliveryVerdict
from runtime.recovery.orphans import OrphanVerdict, recover_orphan
from runtime.recovery.pages import PAGE_SIZE
from runtime.recovery.scheduler import Cursor, PageScheduler
from runtime.stasis.consent import refire_consent
from runtime.stasis.delegate import refresh_delegate
from runtime.stasis.service import refresh_service

log = logging.getLogger(__name__)

RELAY_EVERY_S = 5.0


@dataclass
class Relays:
    engine: RunEngine
    boot_cutoff: datetime
    canceller: Canceller
    evidence_debt: dict[UUID, int] = field(default_factory=dict)
    """Runs of this process whose terminal Steps did not land (the worker's debts)."""
    live_claims: Collection[str] | None = None
    """The worker's live claim tokens: with them the orphan pass also recovers a hop
    of this boot that is gone (runtime.recovery.orphans); None leaves those alone."""
    every_s: float = RELAY_EVERY_S
    errors: int = field(default=0)
    pages: dict[RunStatus, PageScheduler] = field(default_factory=dict)
    lease: BootLeaseKeeper | None = None
    """This boot's lease (several Vessels on one database); None: the only boot."""
    evidence_cursor: tuple[datetime, UUID] | None = None
    """Where the next page of recorded evidence debts starts (with a lease only)."""

    async def run_forever(self) -> None:
        while True:
            await anyio.sleep(self.every_s)
            await self.pass_once()

    async def pass_once(self) -> None:
        """One bounded pass: per status, one revisit page and one forward page."""
        recovery = DeliveryRecovery(self.engine, self.boot_cutoff, may_fence_others=self._judge)
        await self._step(RunStatus.CANCELLING, self._cancel)
        await self._step(RunStatus.RUNNING, self._orphan)
        await self._step(RunStatus.AWAITING_HARDWARE, self._orphan)
        await self._step(RunStatus.AWAITING_CONSENT, self._consent)
        await self._step(RunStatus.AWAITING_DELEGATE, self._delegate)
        await self._step(RunStatus.AWAITING_SERVICE, self._service)
        await self._step(RunStatus.QUEUED, lambda r: self._delivery(recovery, r))
        await self._repair_evidence()
        if self.lease is not None:
            await self._repair_recorded_evidence(self.lease.lease_s)
        await self._pay_cleanup()

    async def _step(self, status: RunStatus, visit: Callable[[Run], Awaitable[bool]]) -> None:
        scheduler = self.pages.setdefault(status, PageScheduler())
        ledger = self.engine.deps.ledger

        async def read(cursor: Cursor, limit: int) -> list[Run]:
            return await ledger.page_runs((status,), cursor, limit)

        async def guarded(run: Run) -> bool:
            """Isolated per Run: a failure answers False, so the page is revisited and
            the Runs after this one are still visited (the scheduler relies on it)."""
            try:
                return await visit(run)
            except Exception as exc:
                self.errors += 1
                log.warning("relay: Run %s not recovered this pass: %r", run.id, exc)
                return False

        try:
            await scheduler.step(read, guarded)
        except Exception as exc:  # the page read itself failed; the next pass retries
            self.errors += 1
            log.warning("relay: %s page failed: %r", status.value, exc)

    async def _cancel(self, run: Run) -> bool:
        return (await self.canceller.cancel(run.id)).status.terminal

    async def _orphan(self, run: Run) -> bool:
        verdict = await recover_orphan(self.engine, self.canceller, run, self.live_claims,
                                       may_fence_others=self._judge)
        # Another live boot's hop is revisited: it becomes ours once its lease expires.
        return verdict not in (OrphanVerdict.UNCONTAINED, OrphanVerdict.LIVE_ELSEWHERE)

    def _judge(self) -> bool:
        """Asked at each judgement of another boot, not once per pass or visit."""
        return self.lease is None or self.lease.steady()

    async def _consent(self, run: Run) -> bool:
        return await refire_consent(self.engine, run) is not None

    async def _delegate(self, run: Run) -> bool:
        return await refresh_delegate(self.engine, run) is not None

    async def _service(self, run: Run) -> bool:
        return await refresh_service(self.engine, run) is not None

    @staticmethod
    async def _delivery(recovery: DeliveryRecovery, run: Run) -> bool:
        verdict = await recovery.recover(run)
        # A live peer's dequeued job is revisited: it becomes ours if that boot dies.
        return not verdict.degraded and verdict not in (DeliveryVerdict.FENCING,
                                                        DeliveryVerdict.HELD_REFUSED,
                                                        DeliveryVerdict.LIVE_ELSEWHERE)

    async def _pay_cleanup(self) -> None:
        """Retry deleting the checkpoints of terminal Runs that are still owed."""
        try:
            still_owed = await pay_cleanup_debt(self.engine.deps.ledger)
        except Exception as exc:  # the debt read failed; the next pass retries
            self.errors += 1
            log.warning("relay: checkpoint debts not read: %r", exc)
            return
        self.errors += len(still_owed)

    async def _repair_recorded_evidence(self, older_than_s: float) -> None:
        """One page of the ledger's evidence debts, of Runs terminal for over a lease."""
        deps = self.engine.deps
        try:
            page = await deps.ledger.evidence_debts(self.evidence_cursor, PAGE_SIZE)
        except Exception as exc:  # the next pass reads the page again
            self.errors += 1
            log.warning("relay: recorded evidence debts not read: %r", exc)
            return
        last = page[-1] if len(page) == PAGE_SIZE else None
        self.evidence_cursor = (last.updated_at, last.id) if last is not None else None
        settled_before = deps.clock.now() - timedelta(seconds=older_than_s)
        for run in page:
            if run.updated_at > settled_before:
                continue  # its own hop may still be writing the Step; a later pass looks
            try:
                await repair_terminal_evidence(deps, run)
            except Exception as exc:
                self.errors += 1
                log.warning("relay: evidence of Run %s not repaired: %r", run.id, exc)

    async def _repair_evidence(self) -> None:
        deps = self.engine.deps
        for run_id in sorted(self.evidence_debt, key=str):
            try:
                run = await deps.ledger.get_run(run_id)
                if run is None or run.seq != self.evidence_debt[run_id]:
                    del self.evidence_debt[run_id]  # a later hop owns the Run's evidence now
                elif run.status.terminal:
                    await repair_terminal_evidence(deps, run)
                    del self.evidence_debt[run_id]
            except Exception as exc:
                self.errors += 1
                log.warning("relay: evidence of Run %s not repaired: %r", run_id, exc)
