"""The Broker implementations the contract and differential tests run against.

`BrokerImpl` wraps one Broker with the few test-only powers the contract
needs: take a job without running it (what a worker that died right after
dequeueing leaves), run the heartbeat sweep now, and let time pass. For the
MemoryBroker time is a manual clock; for the SaqBroker `elapse` really
sleeps (SAQ reads `time.time()`), while `backdate` shifts the stored
`touched`/`started` stamps, which is all SAQ's sweep looks at.

`broker` (defined here as `broker_fixture`; import that name into a test
module to use it) is the parametrised fixture ("memory", "saq"); SAQ runs only
on the asyncio anyio backend. The SAQ database is the harness's
`pg_fresh_dsn` (a new database per test).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import anyio
import pytest

from runtime.adapters.memory import MemoryBroker
from runtime.keys import hop_key
from runtime.seams import Broker, JobInfo, JobStatus

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
SAQ_SWEEP_ABORT_WAIT_S = 0.1


class ManualClock:
    """Aware UTC time that moves only when told to."""

    def __init__(self, start: datetime = EPOCH) -> None:
        self._start = start
        self._offset = 0.0

    def now(self) -> datetime:
        return self._start + timedelta(seconds=self._offset)

    def monotonic(self) -> float:
        return self._offset

    def advance(self, seconds: float) -> None:
        assert seconds >= 0
        self._offset += seconds


@dataclass
class BrokerImpl:
    name: str
    broker: Any  # MemoryBroker | SaqBroker; both satisfy runtime.seams.Broker
    clock: ManualClock | None = None

    @property
    def seam(self) -> Broker:
        broker: Broker = self.broker
        return broker

    async def dequeue(self, queue: str, boot_id: str | None = None) -> JobInfo | None:
        """Take the next job as a worker of `boot_id` would, and leave it unclaimed."""
        if self.name == "memory":
            job: JobInfo | None = await self.broker.dequeue(queue, boot_id)
            return job
        return await self.broker.dequeue(  # type: ignore[no-any-return]
            queue, timeout_s=0.05, boot_id=boot_id)

    async def sweep(self, queue: str) -> list[str]:
        if self.name == "memory":
            return sorted(await self.broker.sweep(queue))
        return sorted(await self.broker.sweep(queue, abort_wait_s=SAQ_SWEEP_ABORT_WAIT_S))

    async def elapse(self, seconds: float) -> None:
        """Let `seconds` pass for the broker's heartbeat arithmetic."""
        if self.clock is not None:
            self.clock.advance(seconds)
        else:
            await anyio.sleep(seconds)

    async def backdate(self, seconds: float) -> None:
        """Like `elapse`, without waiting: SAQ's stored stamps move `seconds` into the past."""
        if self.clock is not None:
            self.clock.advance(seconds)
            return
        pool = self.broker.queue("runs").pool
        shift = int(seconds * 1000)
        async with pool.connection() as conn, conn.transaction():
            cur = await conn.execute("SELECT key, job FROM saq_jobs FOR UPDATE")
            for key, blob in await cur.fetchall():
                job = json.loads(bytes(blob))
                for stamp in ("touched", "started"):
                    if job.get(stamp):
                        job[stamp] -= shift
                await conn.execute(
                    "UPDATE saq_jobs SET job = %s WHERE key = %s",
                    (json.dumps(job).encode(), key),
                )

    async def reset(self) -> None:
        """Forget every job (between differential examples)."""
        if self.clock is not None:
            self.broker.jobs.clear()
            return
        async with self.broker.queue("runs").pool.connection() as conn:
            await conn.execute("DELETE FROM saq_jobs")

    async def wait_status(
        self, key: str, statuses: set[JobStatus], within: float = 15.0
    ) -> JobInfo:
        """Poll until the job is in one of `statuses` (fails after `within` seconds)."""
        info: JobInfo | None = None
        with anyio.move_on_after(within):
            while True:
                info = await self.seam.probe(key)
                if info is not None and info.status in statuses:
                    return info
                await anyio.sleep(0.02)
        raise AssertionError(f"{key} never reached {sorted(statuses)}; last seen {info}")


def new_key() -> tuple[str, UUID]:
    run_id = uuid4()
    return hop_key(run_id, 0), run_id


async def put(
    impl: BrokerImpl,
    key: str,
    *,
    priority: int = 50,
    queue: str = "runs",
    heartbeat: int = 120,
    run_id: UUID | None = None,
    seq: int = 0,
) -> bool:
    return await impl.seam.publish(
        queue, key, run_id=run_id or uuid4(), seq=seq, priority=priority, heartbeat=heartbeat
    )


def saq_dsn_for(request: pytest.FixtureRequest) -> str:
    dsn: str = request.getfixturevalue("pg_fresh_dsn")
    return dsn


@pytest.fixture(name="broker", params=["memory", "saq"])
async def broker_fixture(
    request: pytest.FixtureRequest, anyio_backend: str
) -> AsyncIterator[BrokerImpl]:
    if request.param == "memory":
        clock = ManualClock()
        yield BrokerImpl("memory", MemoryBroker(clock), clock)
        return
    if anyio_backend != "asyncio":
        pytest.skip("SAQ and psycopg run only on asyncio")
    from runtime.adapters.saq import SaqBroker

    broker = SaqBroker(saq_dsn_for(request))
    await broker.connect()
    try:
        yield BrokerImpl("saq", broker)
    finally:
        await broker.disconnect()
