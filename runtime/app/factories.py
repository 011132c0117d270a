"""Lifespan factories of the two profiles, as `create_app` and `vessel serve` use them.

Each factory opens its profile for the duration of the block and yields a
`Lifespan` over it (seed 000_81a5c720b14d934a.txt, "Cancellation, mutation,
and recovery": PostgreSQL startup is strict, refusing to serve when required
reconciliation is degraded; the memory profile is best effort and not
durable). Opening a factory starts nothing: `Lifespan.serving()` does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from runtime.app.http import LifespanFactory
from runtime.app.lifespan import Lifespan
from runtime.app.profiles import LeasedAgents, Vessel, memory_vessel, postgres_vessel
from runtime.seams import FaultPoints


def memory_lifespan(
    *,
    faults: FaultPoints | None = None,
    concurrency: dict[str, int] | None = None,
    relay_every_s: float = 5.0,
) -> LifespanFactory:
    """A fresh memory Vessel per opening; best-effort startup."""

    @asynccontextmanager
    async def factory() -> AsyncIterator[Lifespan]:
        vessel = memory_vessel(faults=faults, concurrency=concurrency)
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
) -> LifespanFactory:
    """The PostgreSQL + SAQ profile; strict startup. `agents`: delegated jobs
    as leased jobs for `vessel jobs work` (default: the reference runtime)."""

    @asynccontextmanager
    async def factory() -> AsyncIterator[Lifespan]:
        async with postgres_vessel(
            dsn, migrate=migrate, faults=faults, concurrency=concurrency, agents=agents
        ) as vessel:
            yield Lifespan(vessel, strict=True, relay_every_s=relay_every_s)

    return factory
