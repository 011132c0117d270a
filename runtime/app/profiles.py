"""Persistence profiles: the wiring of one Vessel's adapters, engine, worker and lanes.

DESIGN section 1: runtime core imports no adapter; `runtime.app` chooses
them. Two profiles exist:

- memory: MemoryLedger, MemoryBroker, system clock and entropy, the
  in-memory effect sink, no faults. Test/local process state only (seed
  000_81a5c720b14d934a.txt, "Cancellation, mutation, and recovery": the
  memory persistence profile is not durable).
- postgres: PostgresLedger on its own pool plus SaqBroker, whose `runs`
  and `rites` queues use SAQ's own autocommit pools and tables (seed 000,
  "Topology and limits"). `postgres_vessel` connects the ledger, then the
  queues, and on exit disconnects the queues before the ledger; the caller
  must have stopped serving the lanes first. When a stop was not proved
  (a `StopUnproven` leaves the block, or a worker is not proven stopped)
  nothing shared is closed: not the queue pools, not the ledger, not the
  job or service stores (seed 000, "Cancellation, mutation, and recovery",
  shutdown paragraph: no use-after-close in a task whose stop was never
  proved). The process that owns them is expected to exit.

Neither profile starts anything: a lifespan runs `Vessel.lanes.serve()`
(and startup reconciliation) in its own task group. The PostgreSQL ledger
is imported only when that profile is used.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import cast

from runtime.adapters.leased_agents import DEFAULT_MODEL_VERSION, LeasedAgentRuntime
from runtime.adapters.memory import MemoryBroker, MemoryEffectSink, MemoryLedger
from runtime.adapters.reference import ReferenceAgentRuntime, ReferenceOrchestrator
from runtime.adapters.saq import SaqBroker, SaqSettings
from runtime.adapters.system import SystemClock, SystemEntropy
from runtime.engine import RunEngine
from runtime.errors import StopUnproven, stop_unproven
from runtime.faults import NoFaults
from runtime.jobs.store import JobStore
from runtime.patterns import default_registry
from runtime.registry import QueueRouter, WorkflowRegistry
from runtime.retry import retried
from runtime.seams import (
    AgentRuntime,
    Broker,
    Clock,
    Deps,
    EffectSink,
    Entropy,
    FaultPoints,
    Ledger,
)
from runtime.service import ServiceContext, ServiceDriver
from runtime.worker import Lanes, Worker

log = logging.getLogger(__name__)

DEFAULT_CONCURRENCY = {"runs": 4, "rites": 2}


@dataclass(frozen=True)
class LeasedAgents:
    """Delegated AgentJobs as leased jobs of `workspace` (issue 8 item 3).

    `postgres_vessel` then submits each delegated job to the PostgreSQL job
    store, where a separate `vessel jobs work --workspace W` process claims
    and executes it; the delegate relay re-admits the parked Run once the
    job has ended. `model_version` is the model a staged result must come
    from (the worker's `--model`).
    """

    workspace: str
    model_version: str = DEFAULT_MODEL_VERSION


@dataclass(frozen=True)
class Vessel:
    """One process incarnation's wired components (nothing running yet)."""

    deps: Deps
    registry: WorkflowRegistry
    engine: RunEngine
    worker: Worker
    lanes: Lanes


def build_vessel(
    deps: Deps,
    *,
    registry: WorkflowRegistry | None = None,
    router: QueueRouter | None = None,
    concurrency: dict[str, int] | None = None,
) -> Vessel:
    """Engine, worker and lanes over `deps`, sharing one registry."""
    registry = registry or default_registry()
    engine = RunEngine(deps, registry, router or QueueRouter())
    worker = Worker(deps, registry)
    lanes = Lanes(worker, dict(concurrency or DEFAULT_CONCURRENCY))
    return Vessel(deps=deps, registry=registry, engine=engine, worker=worker, lanes=lanes)


def make_deps(
    ledger: Ledger,
    broker: Broker,
    *,
    clock: Clock | None = None,
    entropy: Entropy | None = None,
    effects: EffectSink | None = None,
    faults: FaultPoints | None = None,
    boot_id: str | None = None,
    agents: AgentRuntime | None = None,
    services: ServiceContext | None = None,
) -> Deps:
    """Deps with production defaults for every seam not given. Without
    `services` no provider is admitted: a service wait fails its Run."""
    entropy = entropy or SystemEntropy()
    return Deps(
        clock=clock or SystemClock(),
        entropy=entropy,
        ledger=ledger,
        broker=broker,
        faults=faults or NoFaults(),
        effects=effects or MemoryEffectSink(),
        boot_id=boot_id or f"boot-{entropy.new_id()}",
        # The deterministic, effect-free reference adapters (seed 000, "Delegated
        # AgentJob labor"): no real provider or orchestrator is admitted yet.
        agents=agents or ReferenceAgentRuntime(),
        orchestrator=ReferenceOrchestrator(),
        services=services,
    )


def memory_vessel(
    *,
    registry: WorkflowRegistry | None = None,
    router: QueueRouter | None = None,
    concurrency: dict[str, int] | None = None,
    clock: Clock | None = None,
    boot_id: str | None = None,
    faults: FaultPoints | None = None,
    service_driver: ServiceDriver | None = None,
) -> Vessel:
    """The memory profile: everything in this process, nothing durable.

    `faults` defaults to the no-op; `vessel serve` passes a crash plan here.
    With `service_driver`, service waits keep their attempts beside the
    ledger (one memory database) and send them through that driver.
    """
    clock = clock or SystemClock()
    ledger = MemoryLedger()
    services = None if service_driver is None else ServiceContext(
        store=ledger.services, driver=service_driver, clock=clock, faults=faults or NoFaults()
    )
    deps = make_deps(
        ledger, MemoryBroker(clock), clock=clock, boot_id=boot_id, faults=faults,
        services=services,
    )
    return build_vessel(deps, registry=registry, router=router, concurrency=concurrency)


@asynccontextmanager
async def postgres_vessel(
    dsn: str,
    *,
    saq_dsn: str | None = None,
    migrate: bool = False,
    registry: WorkflowRegistry | None = None,
    router: QueueRouter | None = None,
    concurrency: dict[str, int] | None = None,
    effects: EffectSink | None = None,
    saq_settings: SaqSettings | None = None,
    boot_id: str | None = None,
    faults: FaultPoints | None = None,
    agents: LeasedAgents | None = None,
    service_driver: ServiceDriver | None = None,
) -> AsyncIterator[Vessel]:
    """The PostgreSQL profile for the duration of the block.

    With `migrate` the ledger schema is brought to the newest migration
    first; otherwise it must already be current. `saq_dsn` (default: the
    ledger's) names the database of SAQ's tables. The effect sink defaults
    to the in-memory reference sink: no durable external system exists yet.
    `faults` defaults to the no-op; `vessel serve` passes a crash plan here.
    With `agents`, delegated jobs go to the leased job store on the ledger's
    database (`leased_agents`); otherwise the reference agent runtime answers.
    With `service_driver`, service waits keep their attempts in the ledger's
    database (the owner CAS reads them there) and send them through it.
    """
    from runtime.adapters.postgres import PostgresLedger
    from runtime.adapters.postgres import migrate as migrate_ledger
    from runtime.adapters.postgres.jobs_store import PostgresJobStore
    from runtime.adapters.postgres.service_store import PostgresServiceStore

    if migrate:
        await migrate_ledger(dsn)
    ledger = await PostgresLedger.connect(dsn)
    job_store: PostgresJobStore | None = None
    service_store: PostgresServiceStore | None = None
    retained = False  # True once a stop was not proved: then nothing shared is closed
    try:
        if agents is not None:
            job_store = await PostgresJobStore.connect(dsn)
        if service_driver is not None:
            service_store = await PostgresServiceStore.connect(dsn)
        missing = missing_ledger_methods(ledger)
        if missing:
            log.warning("PostgresLedger lacks Ledger methods %s: Runs that need them fail",
                        ", ".join(missing))
        broker = SaqBroker(saq_dsn or dsn, settings=saq_settings)
        await broker.connect()
        leaving: BaseException | None = None
        try:
            # The cast stands for the check above: the ledger may still lack some
            # of the seam's methods while its adapter catches up with the core.
            deps = make_deps(
                cast(Ledger, ledger), broker, effects=effects, boot_id=boot_id, faults=faults,
                agents=None if job_store is None or agents is None
                else leased_runtime(job_store, agents),
                services=None if service_store is None or service_driver is None
                else ServiceContext(store=service_store, driver=service_driver,
                                    clock=SystemClock(), faults=faults or NoFaults()),
            )
            # A database blip is retried within RETRY_BUDGET_S, never a FAILED Run.
            deps = dataclasses.replace(deps, ledger=retried(deps.ledger, deps.entropy))
            yield build_vessel(deps, registry=registry, router=router, concurrency=concurrency)
        except BaseException as exc:
            leaving = exc
            raise
        finally:
            retained = stop_unproven(leaving) or not broker.stop_proven
            if retained:
                _retain_shared_services(leaving)
            else:
                await broker.disconnect()
    finally:
        if not retained:
            if job_store is not None:
                await job_store.close()
            if service_store is not None:
                await service_store.close()
            await ledger.close()


def _retain_shared_services(leaving: BaseException | None) -> None:
    """Log that every shared pool stays open; raise StopUnproven if nothing else is raised."""
    log.error("a worker or relay stop was not proved: the ledger, job and service stores "
              "and SAQ queue pools are left open under it (%s)", leaving)
    if leaving is None:
        raise StopUnproven(
            "SAQ workers are not proven stopped; the ledger, job and service stores and "
            "SAQ queue pools are left open"
        )


def leased_runtime(store: JobStore, agents: LeasedAgents) -> LeasedAgentRuntime:
    """The leased agent runtime over `store` (production clock and retry jitter)."""
    return LeasedAgentRuntime(
        store=store,
        clock=SystemClock(),
        workspace=agents.workspace,
        model_version=agents.model_version,
        entropy=SystemEntropy(),
    )


def missing_ledger_methods(ledger: object) -> list[str]:
    """Public methods of the Ledger seam that `ledger` does not provide."""
    wanted = sorted(
        name for name, value in vars(Ledger).items()
        if callable(value) and not name.startswith("_")
    )
    return [name for name in wanted if not callable(getattr(ledger, name, None))]
