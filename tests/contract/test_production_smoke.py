"""Smoke test of the production wiring: echo and two_step Runs end to end.

The PostgreSQL profile runs them through real SAQ workers (`runs`, `rites`)
on a fresh database: submit, the Run reaches DONE, its delivery is SETTLED,
its SAQ job is complete with broker priority `100 - priority` (seed
000_81a5c720b14d934a.txt, "Admission and exact claim"), and two_step's
external effect was applied exactly once. The memory profile runs the same
flow on both anyio backends.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

from runtime.adapters.memory import MemoryEffectSink
from runtime.app.profiles import Vessel, memory_vessel, postgres_vessel
from runtime.models import DeliveryState, Intent, Run, RunStatus
from runtime.seams import JobStatus

pytestmark = pytest.mark.anyio

async def wait_terminal(vessel: Vessel, run: Run, within: float = 20.0) -> Run:
    current: Run | None = run
    with anyio.move_on_after(within):
        while current is None or not current.status.terminal:
            await anyio.sleep(0.05)
            current = await vessel.deps.ledger.get_run(run.id)
    assert current is not None and current.status.terminal, f"Run never ended: {current}"
    return current


async def wait_job_finished(vessel: Vessel, key: str, within: float = 10.0) -> JobStatus:
    status: JobStatus | None = None
    with anyio.move_on_after(within):
        while True:
            info = await vessel.deps.broker.probe(key)
            status = None if info is None else info.status
            if status is not None and status.finished:
                return status
            await anyio.sleep(0.05)
    raise AssertionError(f"job {key} never finished; last status {status}")


async def run_both_patterns(vessel: Vessel) -> None:
    sink = vessel.deps.effects
    assert isinstance(sink, MemoryEffectSink)
    async with anyio.create_task_group() as tg:
        tg.start_soon(vessel.lanes.serve)
        echo = await vessel.engine.submit(Intent(pattern="echo", prompt="hello", priority=70))
        two = await vessel.engine.submit(Intent(pattern="two_step", prompt="deliver me"))
        done_echo = await wait_terminal(vessel, echo.run)
        done_two = await wait_terminal(vessel, two.run)
        statuses = [await wait_job_finished(vessel, s.delivery.key) for s in (echo, two)]
        echo_job = await vessel.deps.broker.probe(echo.delivery.key)
        tg.cancel_scope.cancel()

    assert done_echo.status is RunStatus.DONE and done_echo.result is not None
    assert done_echo.result["echo"] == "hello"
    assert done_two.status is RunStatus.DONE
    for run in (done_echo, done_two):
        delivery = await vessel.deps.ledger.get_delivery(run.id, 0)
        assert delivery is not None and delivery.state is DeliveryState.SETTLED
    assert statuses == [JobStatus.COMPLETE, JobStatus.COMPLETE]
    assert echo_job is not None and echo_job.priority == 100 - 70
    identity = f"{two.run.id}:deliver"
    assert list(sink.applied()) == [identity]
    assert [c.applied for c in sink.calls if c.identity == identity] == [True]


@pytest.fixture
async def pg_vessel(pg_fresh_dsn: str, anyio_backend: str) -> AsyncIterator[Vessel]:
    if anyio_backend != "asyncio":
        pytest.skip("psycopg and SAQ run only on asyncio")
    try:
        from runtime.adapters.postgres import PostgresLedger  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"PostgresLedger is not importable yet: {exc}")
    async with postgres_vessel(
        pg_fresh_dsn, migrate=True, concurrency={"runs": 2, "rites": 1}
    ) as vessel:
        yield vessel


async def test_postgres_profile_runs_echo_and_two_step_through_real_saq(
    pg_vessel: Vessel,
) -> None:
    await run_both_patterns(pg_vessel)


async def test_memory_profile_runs_echo_and_two_step() -> None:
    await run_both_patterns(memory_vessel(concurrency={"runs": 2, "rites": 1}))


async def test_the_postgres_profile_retries_its_ledger_like_the_simulator(
    pg_vessel: Vessel,
) -> None:
    """Issue M11: the hop's ledger calls on PostgreSQL outlast a database blip
    (runtime.retry), as the simulator's boots do: one wrapping for both."""
    from runtime.retry import RetryingLedger

    assert isinstance(pg_vessel.deps.ledger, RetryingLedger)
    assert isinstance(pg_vessel.engine.deps.ledger, RetryingLedger)
    assert isinstance(pg_vessel.worker.deps.ledger, RetryingLedger)
