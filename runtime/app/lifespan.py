"""The Vessel's lifespan: startup reconciliation, serving, strict shutdown.

Seed 000_81a5c720b14d934a.txt ("Topology and limits", "Cancellation,
mutation, and recovery"). The profile connects the queues first; then
`serving()`:

1. captures the boot cutoff, registers the boot's lease when it has one
   (runtime.recovery.boot_lease), and runs `reconcile_runs` directly (never as
   broker work); a degraded pass refuses startup on the strict (PostgreSQL)
   profile before any worker or HTTP surface starts, and is only logged on
   the best-effort memory profile; `interrupt()` (a SIGTERM during startup,
   issue 15) cancels the pass and raises StartupInterrupted;
2. starts the worker lanes and the supervised maintenance relays;
3. on exit, cancels the relays, stops every worker lane, and proves both
   ended within one 30 s deadline. A part still running at the deadline,
   or one whose stop failed (a lane's `WorkerStopFailed`), makes the phase
   "stuck" and raises ShutdownIncomplete (a `StopUnproven`): the profile
   then leaves every shared service open (ledger, job and service stores,
   queue pools) rather than closing them under a task that may still use
   them, and `vessel serve` exits with one line naming what did not stop.
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
from runtime.errors import StopUnproven, stop_unproven, unproven_stops
from runtime.recovery.boot_lease import BootLeaseKeeper
from runtime.recovery.reconcile import ReconcileReport, reconcile_runs
from runtime.recovery.relay import Relays
from runtime.recovery.supervisor import supervise

log = logging.getLogger(__name__)

SHUTDOWN_DEADLINE_S = 30.0


class StartupRefused(Exception):
    def __init__(self, reasons: list[str]) -> None:
        super().__init__("startup refused, reconciliation degraded: " + "; ".join(reasons))
        self.reasons = reasons


class StartupInterrupted(Exception):
    """A stop was requested (SIGTERM, SIGINT) while startup still ran: the
    reconciliation pass was cancelled where it stood and nothing was served.
    Reconciliation is built to survive process death at any point, so the
    next boot simply runs it again."""

    def __init__(self) -> None:
        super().__init__("startup interrupted: a stop was requested before it completed")


class ShutdownIncomplete(StopUnproven):
    """A relay or worker lane did not end, or failed to prove its end, by the deadline."""


@dataclass
class LifespanStatus:
    boot_id: str
    phase: str = "starting"
    degraded: list[str] = field(default_factory=list)
    relay_restarts: int = 0
    report: ReconcileReport | None = None
    shutdown_error: str | None = None
    """Set with phase "stuck": what did not stop, as ShutdownIncomplete said."""

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
    shutdown_deadline_s: float = SHUTDOWN_DEADLINE_S
    boot_lease_s: float | None = None
    """With a lease (the PostgreSQL profile), this boot registers in the boot
    registry before reconciling and renews its lease while serving, so other
    Vessels on the same database leave its work alone (issue 15, M11). None:
    one process owns the ledger (memory profile) and registers nothing."""
    canceller: Canceller = field(init=False)
    status: LifespanStatus = field(init=False)
    relays: Relays | None = field(init=False, default=None)
    """This boot's relays once it serves (read by tests and the simulator's pauses)."""
    _startup: anyio.CancelScope = field(init=False, default_factory=anyio.CancelScope)
    _interrupted: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        debt = self.vessel.worker.evidence_debt
        self.vessel.engine.evidence_debt = debt
        self.canceller = Canceller(self.vessel.deps, bus=self.vessel.worker.bus, evidence_debt=debt)
        self.status = LifespanStatus(boot_id=self.vessel.deps.boot_id)

    @staticmethod
    async def _renew_before_serving(lease: BootLeaseKeeper) -> None:
        """Renew the lease once more before any worker claims: a reconciliation longer
        than the lease's renewal period would otherwise leave the boot serving on a
        lease that peers may already judge expired, until its first renewal (found by
        the simulator's two_vessels scenario: a peer retired a job it had just taken).
        A failed renewal is only logged; the lease part retries it."""
        try:
            await lease.renew_once()
        except Exception as exc:
            log.warning("boot %s: lease not renewed before serving: %r",
                        lease.deps.boot_id, exc)

    def interrupt(self) -> None:
        """Stop a startup still in progress (call it on the event loop's thread).

        Cancels the reconciliation pass where it stands; `serving()` then
        raises StartupInterrupted instead of starting workers or relays.
        Once startup is complete this does nothing: shutdown is the server's."""
        if self.status.phase in ("starting", "reconciling"):
            self._interrupted = True
            self._startup.cancel()

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[LifespanStatus]:
        deps = self.vessel.deps
        cutoff = deps.clock.now()
        lease = None
        if self.boot_lease_s is not None:
            lease = BootLeaseKeeper(deps, self.boot_lease_s)
            await lease.register()
        self.status.phase = "reconciling"
        report = None
        if not self._interrupted:
            with self._startup:
                report = await reconcile_runs(self.vessel.engine, cutoff, self.canceller,
                                              may_fence_others=lease is None)
        if report is None or self._interrupted:
            self.status.phase = "interrupted"
            raise StartupInterrupted
        self.status.report = report
        self.status.degraded = report.degraded_reasons
        if report.degraded:
            if self.strict:
                self.status.phase = "refused"
                raise StartupRefused(report.degraded_reasons)
            log.warning("startup reconciliation degraded (best effort): %s", self.status.degraded)
        if lease is not None:
            await self._renew_before_serving(lease)
        relays = Relays(self.vessel.engine, cutoff, self.canceller,
                        self.vessel.worker.evidence_debt,
                        live_claims=self.vessel.worker.live_claims,
                        every_s=self.relay_every_s, lease=lease)
        self.relays = relays
        body_failed = False
        incomplete: ShutdownIncomplete | None = None
        async with anyio.create_task_group() as tg:
            relay_part, lane_part = _Part("relays"), _Part("workers")
            parts: tuple[_Part, ...] = (relay_part, lane_part)
            tg.start_soon(relay_part.run,
                          lambda: supervise("relays", relays.run_forever, self._restarted))
            tg.start_soon(lane_part.run, self.vessel.lanes.serve)
            if lease is not None:
                lease_part = _Part("boot lease")
                parts = (lease_part, *parts)
                tg.start_soon(lease_part.run, lease.run_forever)
            self.status.phase = "ready"
            try:
                yield self.status
            except BaseException:
                body_failed = True
                raise
            finally:
                self.status.phase = "stopping"
                with anyio.CancelScope(shield=True):
                    await deps.faults.point(faults.SHUTDOWN_STARTED, boot=deps.boot_id)
                    incomplete = await self._stop(parts)
                if incomplete is None:
                    self.status.phase = "stopped"
                elif body_failed:
                    raise incomplete  # beside the caller's error, in the task group's group
        if incomplete is not None:
            # Raised here, outside the task group, so the caller gets it ungrouped.
            raise incomplete

    async def _stop(self, parts: tuple[_Part, ...]) -> ShutdownIncomplete | None:
        """Cancel every part and prove each ended cleanly within the one deadline.

        Returns ShutdownIncomplete (and makes the phase "stuck") when a part
        is still running at the deadline or its stop failed; the first
        failure is its cause. None when every part was proven to have ended.
        """
        for part in parts:
            part.scope.cancel()
        with anyio.move_on_after(self.shutdown_deadline_s):
            for part in parts:
                await part.done.wait()
        unproven = [part for part in parts if not part.proven]
        if not unproven:
            return None
        self.status.phase = "stuck"
        error = ShutdownIncomplete(
            "shutdown did not prove every task ended: "
            + "; ".join(part.describe(self.shutdown_deadline_s) for part in unproven)
            + "; shared services are left open"
        )
        error.__cause__ = next((p.failure for p in unproven if p.failure is not None), None)
        self.status.shutdown_error = str(error)
        log.error("%s", error)
        return error

    def _restarted(self, name: str, failures: int) -> None:
        self.status.relay_restarts = failures


@dataclass
class _Part:
    """One supervised part of the lifespan (relays or worker lanes) and how it ended.

    A `StopUnproven` raised once its stop was requested (a lane's
    `WorkerStopFailed`: some worker task is still alive) is kept here
    rather than raised into the task group, and the lifespan reports it as
    ShutdownIncomplete. Any other failure propagates as it always did.
    """

    name: str
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    done: anyio.Event = field(default_factory=anyio.Event)
    failure: Exception | None = None

    @property
    def proven(self) -> bool:
        return self.done.is_set() and self.failure is None

    def describe(self, deadline_s: float) -> str:
        if not self.done.is_set():
            return f"{self.name} still running {deadline_s:g} s after stop"
        reasons = "; ".join(str(stop) for stop in unproven_stops(self.failure))
        return f"{self.name} stop failed: {reasons}"

    async def run(self, fn: Callable[[], Awaitable[None]]) -> None:
        try:
            with self.scope:
                await fn()
        except Exception as exc:
            if not (self.scope.cancel_called and stop_unproven(exc)):
                raise
            self.failure = exc
        finally:
            self.done.set()
