"""Lifespan factories of the two profiles, as `create_app` and `vessel serve` use them.

Each factory opens its profile for the duration of the block and yields a
`Lifespan` over it (seed 000_81a5c720b14d934a.txt, "Cancellation, mutation,
and recovery": PostgreSQL startup is strict, refusing to serve when required
reconciliation is degraded; the memory profile is best effort and not
durable). Opening a factory starts nothing: `Lifespan.serving()` does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from types import TracebackType

from runtime.adapters.postgres.reference_provider import PostgresReferenceProvider
from runtime.adapters.reference_service import ReferenceServiceDriver
from runtime.app.http import LifespanFactory
from runtime.app.lifespan import Lifespan
from runtime.app.profiles import LeasedAgents, Vessel, memory_vessel, postgres_vessel
from runtime.errors import stop_unproven
from runtime.recovery.boot_lease import BOOT_LEASE_S
from runtime.registry import WorkflowRegistry
from runtime.seams import FaultPoints

SERVICE_FINISH_AFTER_S = 2.0
"""How long a job of the reference provider takes (`--services reference`)."""


def memory_lifespan(
    *,
    faults: FaultPoints | None = None,
    concurrency: dict[str, int] | None = None,
    relay_every_s: float = 5.0,
    services: bool = False,
    registry: WorkflowRegistry | None = None,
) -> LifespanFactory:
    """A fresh memory Vessel per opening; best-effort startup. `services`:
    service waits go to the in-process reference provider. `registry`: the
    Patterns served (default: the shipped ones)."""

    @asynccontextmanager
    async def factory() -> AsyncIterator[Lifespan]:
        driver = ReferenceServiceDriver(finish_after_s=SERVICE_FINISH_AFTER_S) if services \
            else None
        vessel = memory_vessel(faults=faults, concurrency=concurrency, service_driver=driver,
                               registry=registry)
        yield Lifespan(vessel, strict=False, relay_every_s=relay_every_s)

    return factory


def vessel_lifespan(vessel: Vessel, *, strict: bool = False) -> LifespanFactory:
    """An already built Vessel (tests keep a handle on its ledger)."""

    @asynccontextmanager
    async def factory() -> AsyncIterator[Lifespan]:
        yield Lifespan(vessel, strict=strict)

    return factory


def postgres_lifespan(
    dsn: str,
    *,
    faults: FaultPoints | None = None,
    migrate: bool = False,
    concurrency: dict[str, int] | None = None,
    relay_every_s: float = 5.0,
    agents: LeasedAgents | None = None,
    services: bool = False,
    registry: WorkflowRegistry | None = None,
) -> LifespanFactory:
    """The PostgreSQL + SAQ profile; strict startup. `agents`: delegated jobs
    as leased jobs for `vessel jobs work` (default: the reference runtime).
    `services`: service waits go to the durable reference provider in the
    same database (`PostgresReferenceProvider`). `registry`: the Patterns
    served (default: the shipped ones)."""

    @asynccontextmanager
    async def factory() -> AsyncIterator[Lifespan]:
        async with AsyncExitStack() as stack:
            driver = None
            if services:
                driver = await PostgresReferenceProvider.connect(
                    dsn, finish_after_s=SERVICE_FINISH_AFTER_S)
                stack.push_async_exit(_close_unless_stop_unproven(driver.close))
            vessel = await stack.enter_async_context(postgres_vessel(
                dsn, migrate=migrate, faults=faults, concurrency=concurrency, agents=agents,
                service_driver=driver, registry=registry,
            ))
            yield Lifespan(vessel, strict=True, relay_every_s=relay_every_s,
                           boot_lease_s=BOOT_LEASE_S)

    return factory


def _close_unless_stop_unproven(
    close: Callable[[], Awaitable[None]],
) -> Callable[[type[BaseException] | None, BaseException | None, TracebackType | None],
              Awaitable[bool]]:
    """An exit callback that closes a shared service unless a stop was not proved.

    The reference provider's pool is shared with hops like the ledger's
    (seed 000, shutdown paragraph): it stays open under a task that may
    still be running, exactly as `postgres_vessel` leaves its own pools.
    """

    async def exit_(
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        if not stop_unproven(exc):
            await close()
        return False

    return exit_
