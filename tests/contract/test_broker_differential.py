"""Differential check: MemoryBroker against real SAQ on PostgreSQL, same operations.

MemoryBroker is the simulator's model of SAQ (DESIGN section 2: "the same
observable semantics"), so every simulation result about delivery rests on
it. Hypothesis draws a sequence of the operations both implementations
support - publish under a key (including duplicates and cross-queue
reuse), dequeue by priority, probe, abort of queued and active jobs, touch,
the passage of time, and the heartbeat sweep - applies it to a fresh
MemoryBroker and to a SaqBroker on a clean `saq_jobs`, and compares every
result and, at the end, every job. Time passes on the memory side through
its manual clock and on the SAQ side by moving the stored stamps back,
which is all SAQ's sweep reads.

Set BROKER_DIFF_EXAMPLES to change the number of examples (default 200).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from uuid import UUID

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from runtime.adapters.memory import MemoryBroker
from runtime.adapters.saq import SaqBroker
from runtime.keys import hop_key
from runtime.seams import JobInfo
from tests.contract.broker_impls import BrokerImpl, ManualClock

pytestmark = pytest.mark.anyio

EXAMPLES = int(os.environ.get("BROKER_DIFF_EXAMPLES", "200"))
QUEUES = ("runs", "rites")
KEYS = 4
PRIORITIES = (40, 10, 70, 25)  # distinct per key: SAQ orders ties by second only
HEARTBEAT = 100
NEVER_SWEPT = 3  # this key's job has heartbeat 0
STEPS = (40.0, 110.0)  # sums never land near the heartbeat: no real-time race on SAQ


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def saq_impl(pg_fresh_dsn: str) -> AsyncIterator[BrokerImpl]:
    broker = SaqBroker(pg_fresh_dsn)
    await broker.connect()
    try:
        yield BrokerImpl("saq", broker)
    finally:
        await broker.disconnect()


@dataclass(frozen=True)
class Op:
    name: str
    arg: int | str | float = 0
    queue: str = "runs"
    variant: int = 0
    """publish: 0 as usual, 1 another priority, 2 the other queue (a key spans queues)."""


def key_of(index: int) -> str:
    return hop_key(UUID(int=index + 1), 0)


def home_queue(index: int) -> str:
    return QUEUES[index % 2]


keys = st.integers(0, KEYS - 1)
ops = st.one_of(
    st.builds(Op, st.just("publish"), keys, variant=st.sampled_from((0, 0, 0, 1, 2))),
    st.builds(Op, st.just("dequeue"), queue=st.sampled_from(QUEUES)),
    st.builds(Op, st.just("probe"), keys),
    st.builds(Op, st.just("abort"), keys),
    st.builds(Op, st.just("touch"), keys),
    st.builds(Op, st.just("elapse"), st.sampled_from(STEPS)),
    st.builds(Op, st.just("sweep")),
)


def seen(info: JobInfo | None) -> tuple[object, ...] | None:
    """What must agree: status, lane, priority, error, identity, whether it ever started."""
    if info is None:
        return None
    return (info.key, info.status.value, info.queue, info.priority, info.error,
            info.run_id, info.seq, info.started_at is None)


async def apply(impl: BrokerImpl, op: Op) -> object:
    b = impl.seam
    if op.name == "publish":
        index = int(op.arg)
        queue = home_queue(index + (op.variant == 2))
        return await b.publish(
            queue, key_of(index), run_id=UUID(int=index + 1), seq=0,
            priority=PRIORITIES[index] + (op.variant == 1),
            heartbeat=0 if index == NEVER_SWEPT else HEARTBEAT,
        )
    if op.name == "dequeue":
        job = await impl.dequeue(op.queue)
        return None if job is None else job.key
    if op.name == "probe":
        return seen(await b.probe(key_of(int(op.arg))))
    if op.name == "abort":
        return seen(await b.abort(key_of(int(op.arg)), f"abort {op.arg}"))
    if op.name == "touch":
        await b.touch(key_of(int(op.arg)))
        return None
    if op.name == "elapse":
        await impl.backdate(float(op.arg))
        return None
    if op.name == "sweep":
        return [await impl.sweep(queue) for queue in QUEUES]
    raise AssertionError(op)


async def snapshot(impl: BrokerImpl) -> list[tuple[object, ...] | None]:
    return [seen(await impl.seam.probe(key_of(i))) for i in range(KEYS)]


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(sequence=st.lists(ops, min_size=15, max_size=40))
@example(  # an abort refreshes the heartbeat: the aborting job is not swept yet
    sequence=[Op("publish", 0), Op("dequeue", queue="runs"), Op("elapse", 110.0),
              Op("abort", 0), Op("sweep"), Op("elapse", 110.0), Op("sweep")]
)
async def test_memory_broker_observes_what_saq_observes(
    saq_impl: BrokerImpl, sequence: list[Op]
) -> None:
    await saq_impl.reset()
    clock = ManualClock()
    memory = BrokerImpl("memory", MemoryBroker(clock), clock)
    for step, op in enumerate(sequence):
        expected = await apply(saq_impl, op)
        got = await apply(memory, op)
        assert got == expected, f"step {step} {op}: memory {got!r} != SAQ {expected!r}"
    assert await snapshot(memory) == await snapshot(saq_impl)
