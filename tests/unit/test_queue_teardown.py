"""Queue teardown under cancellation, with fake queues (no database).

Seed 000_81a5c720b14d934a.txt, "Cancellation, mutation, and recovery"
(shutdown paragraph): every configured disconnect is attempted and the
failures are reported together; a cancellation is kept until the queue
being closed has finished and the reverse sweep has attempted every queue.
The case that matters is a plain `asyncio.Task.cancel()`, which an anyio
shield does not hold back. The simulator runs on trio and has neither
asyncio task cancellation nor SAQ pools, so this is checked here and
against real SAQ pools in tests/contract/test_saq_adapter.py.
"""

from __future__ import annotations

import asyncio

import pytest

from runtime.adapters.saq.teardown import disconnect_in_reverse

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class FakeQueue:
    """A queue whose disconnect can be held open and can fail."""

    def __init__(self, name: str, log: list[str], *, fails: bool = False) -> None:
        self.name = name
        self.log = log
        self.fails = fails
        self.entered = asyncio.Event()
        self.proceed = asyncio.Event()
        self.proceed.set()

    async def disconnect(self) -> None:
        self.log.append(f"{self.name}:start")
        self.entered.set()
        await self.proceed.wait()
        self.log.append(f"{self.name}:closed")
        if self.fails:
            raise RuntimeError(f"{self.name} failed to close")


async def sweep(queues: dict[str, FakeQueue]) -> None:
    outcome = await disconnect_in_reverse(queues)
    outcome.raise_for_outcome("disconnecting fake queues")


async def test_queue_teardown_defers_task_cancel_until_every_queue_was_attempted() -> None:
    log: list[str] = []
    queues = {name: FakeQueue(name, log) for name in ("a", "b", "c")}
    closing_first = queues["c"]
    closing_first.proceed.clear()
    task = asyncio.get_running_loop().create_task(sweep(queues))
    await closing_first.entered.wait()
    task.cancel()  # lands while the first queue (reverse order) is closing
    await asyncio.sleep(0)
    assert log == ["c:start"]  # held: the cancellation did not move the sweep on
    closing_first.proceed.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert log == ["c:start", "c:closed", "b:start", "b:closed", "a:start", "a:closed"]


async def test_queue_teardown_groups_failures_as_the_cause_of_a_deferred_cancel() -> None:
    log: list[str] = []
    queues = {"a": FakeQueue("a", log, fails=True), "b": FakeQueue("b", log),
              "c": FakeQueue("c", log, fails=True)}
    queues["c"].proceed.clear()
    task = asyncio.get_running_loop().create_task(sweep(queues))
    await queues["c"].entered.wait()
    task.cancel()
    task.cancel()  # a second request changes nothing: still one deferred cancellation
    await asyncio.sleep(0)
    queues["c"].proceed.set()
    with pytest.raises(asyncio.CancelledError) as caught:
        await task
    assert [entry for entry in log if entry.endswith(":closed")] == [
        "c:closed", "b:closed", "a:closed"]
    cause = caught.value.__cause__
    assert isinstance(cause, ExceptionGroup)
    assert sorted(str(e) for e in cause.exceptions) == ["a failed to close", "c failed to close"]


async def test_queue_teardown_without_cancellation_raises_the_grouped_failures() -> None:
    log: list[str] = []
    queues = {"a": FakeQueue("a", log, fails=True), "b": FakeQueue("b", log)}
    with pytest.raises(ExceptionGroup) as caught:
        await sweep(queues)
    assert [str(e) for e in caught.value.exceptions] == ["a failed to close"]
    assert log == ["b:start", "b:closed", "a:start", "a:closed"]


async def test_queue_teardown_without_failures_or_cancellation_returns() -> None:
    log: list[str] = []
    await sweep({"a": FakeQueue("a", log), "b": FakeQueue("b", log)})
    assert log == ["b:start", "b:closed", "a:start", "a:closed"]


async def test_saq_broker_disconnect_defers_task_cancel_until_every_queue_was_attempted() -> None:
    """The broker's own teardown, over fake queues in place of its SAQ queues."""
    from runtime.adapters.saq import SaqBroker

    log: list[str] = []
    broker = SaqBroker("postgresql://unused.invalid/never", queues=("runs", "rites"))
    queues = {name: FakeQueue(name, log) for name in ("runs", "rites")}
    broker._queues = queues  # type: ignore[assignment]  # stands in for connect()
    queues["rites"].proceed.clear()
    task = asyncio.get_running_loop().create_task(broker.disconnect())
    await queues["rites"].entered.wait()
    task.cancel()
    await asyncio.sleep(0)
    queues["rites"].proceed.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert log == ["rites:start", "rites:closed", "runs:start", "runs:closed"]
    assert not broker.connected
