"""An unproved worker stop leaves the shared services live (real SAQ, PostgreSQL).

Seed 000_81a5c720b14d934a.txt, "Cancellation, mutation, and recovery"
(shutdown paragraph): a worker-stop failure raises and leaves the shared
dependencies open; teardown must not close a pool under a task whose stop
was never proved. Here a hop ignores every cancellation past a shortened
SAQ stop deadline. The lifespan must end "stuck" with ShutdownIncomplete,
and the PostgreSQL profile must leave the ledger, the service store and the
SAQ queue pools open, so that the hop, once it does end, still settles its
Run instead of failing with a closed pool and leaving it RUNNING.

The simulator cannot check this: it runs on trio with the memory broker,
which has no SAQ launcher or process tasks, no asyncio `Task.cancel()` and
no connection pool to close.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID

import anyio
import pytest

from runtime.adapters.postgres import PostgresLedger
from runtime.adapters.reference_service import ReferenceServiceDriver
from runtime.adapters.saq import SaqBroker, SaqSettings, WorkerStopFailed
from runtime.app.lifespan import Lifespan, ShutdownIncomplete
from runtime.app.profiles import Vessel, postgres_vessel
from runtime.hop import HopContext
from runtime.models import Intent, Run, RunStatus
from runtime.patterns import default_registry
from runtime.registry import Node, Pattern
from runtime.retry import unretried
from tests.bounds import HANG_S

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Stubborn:
    """A node that ignores every cancellation until the test releases it."""

    def __init__(self) -> None:
        self.started = anyio.Event()
        self.release = anyio.Event()
        self.cancellations = 0

    async def node(self, ctx: HopContext, state: dict[str, Any]) -> dict[str, Any]:
        self.started.set()
        while not self.release.is_set():
            try:
                await anyio.sleep(0.05)
            except BaseException:
                self.cancellations += 1  # as a task that lost its cancellation does
        return {**state, "stubborn": "released"}


async def run_status(vessel: Vessel, run_id: UUID) -> RunStatus:
    run = await vessel.deps.ledger.get_run(run_id)
    assert run is not None
    return run.status


async def wait_terminal(vessel: Vessel, run_id: UUID, within: float = 20.0) -> Run:
    run: Run | None = None
    with anyio.move_on_after(within):
        while run is None or not run.status.terminal:
            await anyio.sleep(0.05)
            run = await vessel.deps.ledger.get_run(run_id)
    assert run is not None and run.status.terminal, f"Run never ended: {run}"
    return run


@pytest.fixture
def stubborn() -> Stubborn:
    return Stubborn()


@pytest.fixture
async def retained(stubborn: Stubborn) -> AsyncIterator[list[Vessel]]:
    """Vessels whose pools the test closes itself once the stuck hop has ended."""
    vessels: list[Vessel] = []
    yield vessels
    stubborn.release.set()  # whatever failed, the hop may end now
    for vessel in vessels:
        broker = vessel.deps.broker
        assert isinstance(broker, SaqBroker)
        await broker.reap(within_s=HANG_S)
        if broker.connected:
            await broker.disconnect()
        services = vessel.deps.services
        if services is not None:
            await services.store.close()  # type: ignore[attr-defined]
        ledger = unretried(vessel.deps.ledger)  # the profile retries its ledger (M11)
        assert isinstance(ledger, PostgresLedger)
        await ledger.close()


async def test_an_unproved_worker_stop_leaves_the_shared_pools_live(
    pg_fresh_dsn: str, stubborn: Stubborn, retained: list[Vessel]
) -> None:
    registry = default_registry()
    registry.register(Pattern(name="stubborn", version=1,
                              nodes=(Node("stubborn", stubborn.node),)))
    settings = SaqSettings(stop_deadline_s=2.0, cancel_deadline_s=0.5)
    lifespan: Lifespan | None = None
    run_id: UUID | None = None
    with pytest.raises(ShutdownIncomplete) as caught:
        async with postgres_vessel(
            pg_fresh_dsn, migrate=True, registry=registry, saq_settings=settings,
            concurrency={"runs": 1, "rites": 1}, service_driver=ReferenceServiceDriver(),
        ) as vessel:
            retained.append(vessel)
            lifespan = Lifespan(vessel, strict=True, relay_every_s=0.2)
            async with lifespan.serving():
                admitted = await vessel.engine.submit(Intent(pattern="stubborn", prompt="x"))
                run_id = admitted.run.id
                with anyio.fail_after(HANG_S):
                    await stubborn.started.wait()
    assert lifespan is not None and run_id is not None
    vessel = retained[0]

    # The stop was not proved, and said so.
    assert lifespan.status.phase == "stuck"
    assert stubborn.cancellations >= 1
    assert "workers stop failed" in str(caught.value)
    assert lifespan.status.shutdown_error == str(caught.value)
    cause = caught.value.__cause__
    assert isinstance(cause, BaseExceptionGroup)
    assert any(isinstance(e, WorkerStopFailed) for e in cause.exceptions)

    # Every shared service is still open under the hop that never stopped.
    broker = vessel.deps.broker
    assert isinstance(broker, SaqBroker)
    assert broker.connected and not broker.stop_proven
    assert all(not broker.queue(name).pool.closed for name in broker.queue_names)
    assert vessel.deps.services is not None
    assert not vessel.deps.services.store._pool.closed  # type: ignore[attr-defined]
    assert await run_status(vessel, run_id) is RunStatus.RUNNING  # the ledger pool answers

    # Once the hop does end, it settles its Run through the still-open ledger.
    stubborn.release.set()
    done = await wait_terminal(vessel, run_id)
    assert done.status is RunStatus.DONE
    assert done.result is not None and done.result["stubborn"] == "released"
