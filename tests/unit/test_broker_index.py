"""MemoryBroker's index of QUEUED jobs (JobTable.queued) against a scan of every job:
after any mix of publishes, dequeues, aborts, finishes, retires and table edits the
index holds exactly the QUEUED jobs of each queue, in table order, and a second
broker over the same table sees the same index (issue M10)."""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime

import anyio

from runtime.adapters.memory.broker import JobTable, MemoryBroker, _Job
from runtime.seams import JobStatus
from sim.clock import VirtualClock


def _scan(jobs: JobTable) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for key, job in jobs.items():
        if job.info.status is JobStatus.QUEUED:
            out.setdefault(job.info.queue, []).append(key)
    return out


def _index(jobs: JobTable) -> dict[str, list[str]]:
    return {q: list(d) for q, d in jobs.queued.items() if d}


def test_index_matches_scan_under_random_operations() -> None:
    async def main() -> None:
        for seed in range(30):
            rng = random.Random(seed)
            clock = VirtualClock(datetime(2026, 1, 1, tzinfo=UTC))
            broker = MemoryBroker(clock)
            other = MemoryBroker(clock, jobs=broker.jobs)
            assert other.jobs is broker.jobs
            for step in range(200):
                b = rng.choice((broker, other))
                key = f"k{rng.randrange(40)}"
                op = rng.randrange(8)
                if op < 3:
                    await b.publish(rng.choice(("runs", "hw")), key, run_id=uuid.UUID(int=step),
                                    seq=1, priority=rng.randrange(3), heartbeat=60)
                elif op == 3:
                    await b.dequeue(rng.choice(("runs", "hw")), "boot")
                elif op == 4:
                    await b.abort(key, "stop")
                elif op == 5:
                    await b.finish(key, rng.choice((JobStatus.COMPLETE, JobStatus.FAILED)))
                elif op == 6:
                    await b.retire(key, "dead")
                elif rng.random() < 0.05:
                    b.jobs.clear()
                elif key in b.jobs:
                    b.jobs.pop(key)
                assert _index(broker.jobs) == _scan(broker.jobs), (seed, step)

    anyio.run(main, backend="trio")


def test_plain_dict_and_copies() -> None:
    clock = VirtualClock(datetime(2026, 1, 1, tzinfo=UTC))
    broker = MemoryBroker(clock, jobs={})  # type: ignore[arg-type]
    assert isinstance(broker.jobs, JobTable)
    table = JobTable()
    from runtime.seams import JobInfo
    info = JobInfo(key="a", queue="q", status=JobStatus.QUEUED, priority=0,
                   run_id=uuid.UUID(int=1), seq=1)
    table["a"] = _Job(info, 60, 1, 0.0)
    assert list(table.queued["q"]) == ["a"]
    assert type(JobTable(table).copy()) is dict
    del table["a"]
    assert _index(table) == {}
