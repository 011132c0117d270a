"""The Vessel's lifespan: startup reconciliation, serving, strict shutdown.

Seed 000_81a5c720b14d934a.txt ("Topology and limits", "Cancellation,
mutation, and recovery"). The profile connects the queues first; then
`serving()`:

1. captures the boot cutoff and runs `reconcile_runs` directly (never as
   broker work); a degraded pass refuses startup on the strict (PostgreSQL)
   profile before any worker or HTTP surface starts, and is only logged on
   the best-effort memory profile;
2. starts the worker lanes and the supervised maintenance relays;
3. on exit, cancels the relays, stops every worker lane, and proves both
   ended within one 30 s deadline; otherwise it raises ShutdownIncomplete,
   so the profile's queue teardown (which refuses while a worker is not
   proven stopped) keeps the shared pools alive rather than pulling them
   from under a live task.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio

from runtime import faults
from runtime.app.profiles import Vessel
from runtime.cancel import Canceller
from runtime.recovery.reconcile import ReconcileReport, reconcile_runs
from runtime.recovery.relay import Relays
from runtime.recovery.supervisor import supervise

log = logging.getLogger(__name__)

SHUTDOWN_DEADLINE_S = 30.0


class StartupRefused(Exception):
    def __init__(self, reasons: list[str]) -> None:
        super().__init__("startup refused, reconciliation degraded: " + "; ".join(reasons))
        self.reasons = reasons


class ShutdownIncomplete(Exception):
    """A relay or worker lane did not end within the shutdown deadline."""


@dataclass
class LifespanStatus:
    boot_id: str
    phase: str = "starting"
    degraded: list[str] = field(default_factory=list)
    relay_restarts: int = 0
    report: ReconcileReport | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "boot_id": self.boot_id,
            "phase": self.phase,
            "degraded": list(self.degraded),
            "relay_restarts": self.relay_restarts,
        }


@dataclass
class Lifespan:
    vessel: Vessel
    strict: bool
    relay_every_s: float = 5.0
    canceller: Canceller = field(init=False)
    status: LifespanStatus = field(init=False)

    def __post_init__(self) -> None:
        debt = self.vessel.worker.evidence_debt
        self.vessel.engine.evidence_debt = debt
        self.canceller = Canceller(self.vessel.deps, bus=self.vessel.worker.bus, evidence_debt=debt)
        self.status = LifespanStatus(boot_id=self.vessel.deps.boot_id)

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[LifespanStatus]:
        deps = self.vessel.deps
        cutoff = deps.clock.now()
        self.status.phase = "reconciling"
        report = await reconcile_runs(self.vessel.engine, cutoff, self.canceller)
        self.status.report = report
        self.status.degraded = report.degraded_reasons
        if report.degraded:
            if self.strict:
                self.status.phase = "refused"
                raise StartupRefused(report.degraded_reasons)
            log.warning("startup reconciliation degraded (best effort): %s", self.status.degraded)
        relays = Relays(self.vessel.engine, cutoff, self.canceller,
                        self.vessel.worker.evidence_debt, every_s=self.relay_every_s)
        async with anyio.create_task_group() as tg:
            relay_scope, lane_scope = anyio.CancelScope(), anyio.CancelScope()
            relays_done, lanes_done = anyio.Event(), anyio.Event()
            tg.start_soon(_scoped, relay_scope, relays_done,
                          lambda: supervise("relays", relays.run_forever, self._restarted))
            tg.start_soon(_scoped, lane_scope, lanes_done, self.vessel.lanes.serve)
            self.status.phase = "ready"
            try:
                yield self.status
            finally:
                self.status.phase = "stopping"
                with anyio.CancelScope(shield=True):
                    await deps.faults.point(faults.SHUTDOWN_STARTED, boot=deps.boot_id)
                    relay_scope.cancel()
                    lane_scope.cancel()
                    with anyio.move_on_after(SHUTDOWN_DEADLINE_S):
                        await relays_done.wait()
                        await lanes_done.wait()
                    if not (relays_done.is_set() and lanes_done.is_set()):
                        self.status.phase = "stuck"
                        raise ShutdownIncomplete(
                            f"relays ended: {relays_done.is_set()}, "
                            f"workers ended: {lanes_done.is_set()}"
                        )
                self.status.phase = "stopped"

    def _restarted(self, name: str, failures: int) -> None:
        self.status.relay_restarts = failures


async def _scoped(
    scope: anyio.CancelScope, done: anyio.Event, fn: Callable[[], Awaitable[None]]
) -> None:
    try:
        with scope:
            await fn()
    finally:
        done.set()
