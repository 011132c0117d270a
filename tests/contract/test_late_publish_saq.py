"""On PostgreSQL and SAQ: a publisher that loses its acknowledgement after
cancellation aborts the late SAQ job (seed 000_81a5c720b14d934a.txt,
"Cancellation, mutation, and recovery").

The same engine code as tests/unit/test_late_publish.py, over the real
PostgresLedger and SaqBroker on one fresh database: the Run is cancelled
while its publish is in flight (the canceller probes SAQ before the job
exists and commits CANCELLED), then the SAQ job is really enqueued and the
acknowledgement is lost. The publisher must leave it aborted in `saq_jobs`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID

import pytest

from runtime.adapters.memory import MemoryEffectSink
from runtime.adapters.saq import SaqBroker
from runtime.cancel import Canceller
from runtime.engine import RunEngine
from runtime.errors import BrokerUnavailable
from runtime.keys import hop_key
from runtime.models import Intent, RunStatus
from runtime.patterns import default_registry
from runtime.seams import Deps, JobInfo, JobStatus
from tests.contract.ledger_impls import postgres_ledger
from tests.unit.fakes import FakeClock, FakeEntropy, ScriptedFaults

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class InFlightSaq:
    """A SaqBroker whose publishes land only after `during` ran, then lose their ack."""

    def __init__(self, saq: SaqBroker) -> None:
        self.saq = saq
        self.during: Any = None

    async def publish(self, queue: str, key: str, *, run_id: UUID, seq: int, priority: int,
                      heartbeat: int) -> bool:
        if self.during is not None:
            await self.during(run_id)
        await self.saq.publish(queue, key, run_id=run_id, seq=seq, priority=priority,
                               heartbeat=heartbeat)
        raise BrokerUnavailable(f"acknowledgement of {key} lost (test)")

    async def probe(self, key: str) -> JobInfo | None:
        return await self.saq.probe(key)

    async def abort(self, key: str, reason: str) -> JobInfo | None:
        return await self.saq.abort(key, reason)

    async def touch(self, key: str) -> None:
        await self.saq.touch(key)

    async def retire(self, key: str, reason: str) -> JobInfo | None:
        return await self.saq.retire(key, reason)

    async def serve(self, queue: str, handler: Any, concurrency: int, *,
                    boot_id: str | None = None) -> None:
        await self.saq.serve(queue, handler, concurrency, boot_id=boot_id)


@pytest.fixture
async def world(pg_fresh_dsn: str) -> AsyncIterator[tuple[RunEngine, InFlightSaq]]:
    async with postgres_ledger(pg_fresh_dsn) as ledger:
        saq = SaqBroker(pg_fresh_dsn)
        await saq.connect()
        try:
            broker = InFlightSaq(saq)
            deps = Deps(clock=FakeClock(), entropy=FakeEntropy(), ledger=ledger,
                        broker=broker, faults=ScriptedFaults(), effects=MemoryEffectSink(),
                        boot_id="boot-1")
            yield RunEngine(deps, default_registry()), broker
        finally:
            await saq.disconnect()


async def test_a_publisher_that_loses_its_ack_after_cancellation_aborts_the_saq_job(
    world: tuple[RunEngine, InFlightSaq],
) -> None:
    engine, broker = world

    async def cancel(run_id: UUID) -> None:
        done = await Canceller(engine.deps).cancel(run_id)
        assert done.status is RunStatus.CANCELLED
        assert await broker.saq.probe(hop_key(run_id, 0)) is None  # nothing to fence yet

    broker.during = cancel
    sub = await engine.submit(Intent(pattern="echo", sigil="alice"))

    run = await engine.deps.ledger.get_run(sub.run.id)
    assert run is not None and run.status is RunStatus.CANCELLED
    late = await broker.saq.probe(hop_key(sub.run.id, 0))
    assert late is not None and late.status is JobStatus.ABORTED  # not left queued in SAQ
    assert late.error == "cancelled: late publish"
