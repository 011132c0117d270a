"""`vessel jobs work` (seed 004_85033eb8fc772f12.txt, "Shutdown and supervision").

The loop is driven in-process with a FakeClock and short drain bounds; the
exit statuses go through typer's runner; one test starts the real process
and stops it with SIGTERM and SIGINT.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from uuid import UUID

import anyio
import pytest
from typer.testing import CliRunner

from runtime.adapters.memory.jobs_store import MemoryJobStore
from runtime.adapters.reference_model import ReferenceModelClient
from runtime.app import jobs_cli
from runtime.app.cli import cli
from runtime.errors import LedgerUnavailable
from runtime.jobs import (
    EvidenceRecord,
    JobState,
    JobStore,
    LeasedJob,
    ModelReply,
    ModelRequest,
    WorkerContext,
    new_job,
    run_once,
)
from tests.bounds import HANG_S
from tests.unit.fakes import FakeClock

ROOT = Path(__file__).resolve().parents[2]
WS = "acme"


class World:
    def __init__(self) -> None:
        self.clock = FakeClock()
        self.store = MemoryJobStore()
        self.model = ReferenceModelClient()
        self._n = 0

    def ctx(self, worker: str = "w1") -> WorkerContext:
        return WorkerContext(
            store=self.store,
            model=self.model,
            clock=self.clock,
            workspace=WS,
            worker_id=worker,
            scopes=(WS,),
        )

    async def receive(self) -> LeasedJob:
        self._n += 1
        now = self.clock.now()
        evidence = EvidenceRecord(
            id=UUID(int=500 + self._n), workspace=WS, payload="name: Ada", received_at=now
        )
        self.clock.advance(1)
        return await self.store.receive(
            evidence, new_job(UUID(int=self._n), evidence, "reference-1", now)
        )

    async def job(self, job_id: UUID) -> LeasedJob:
        job = await self.store.get(job_id)
        assert job is not None
        return job


# -- the loop -------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_drain_bound_is_ten_seconds() -> None:
    assert jobs_cli.DRAIN_S == 10.0


@pytest.mark.anyio
async def test_the_loop_claims_nothing_once_stop_is_set() -> None:
    w = World()
    job = await w.receive()
    stop = anyio.Event()
    stop.set()
    report = await jobs_cli.work_loop(w.ctx(), stop, idle_s=0.01)
    assert report.attempts == 0 and not report.abandoned
    assert (await w.job(job.id)).fence == 0


@pytest.mark.anyio
async def test_the_loop_works_through_eligible_jobs_and_idles_until_stopped() -> None:
    w = World()
    jobs = [await w.receive() for _ in range(3)]
    stop = anyio.Event()
    attempts: list[object] = []

    async def step(ctx: WorkerContext) -> object:
        result = await run_once(ctx)
        attempts.append(result)
        if result is None:
            stop.set()  # idle: nothing left
        return result

    with anyio.fail_after(HANG_S):
        report = await jobs_cli.work_loop(w.ctx(), stop, idle_s=0.01, step=step)
    assert report.attempts == 3 and attempts[-1] is None
    assert [(await w.job(j.id)).state for j in jobs] == [JobState.PUBLISHED] * 3


@pytest.mark.anyio
async def test_a_stop_lets_the_attempt_in_flight_finish_and_claims_no_more() -> None:
    w = World()
    first, second = await w.receive(), await w.receive()
    stop = anyio.Event()

    async def slow(request: ModelRequest) -> ModelReply:
        stop.set()  # SIGTERM arrives mid-call
        await anyio.sleep(0.05)
        return w.model.reply(request)

    w.model.script.append(slow)
    with anyio.fail_after(HANG_S):
        report = await jobs_cli.work_loop(w.ctx(), stop, idle_s=0.01, drain_s=5)
    assert report.attempts == 1 and not report.abandoned
    assert (await w.job(first.id)).state is JobState.PUBLISHED
    assert (await w.job(second.id)).fence == 0


@pytest.mark.anyio
async def test_an_attempt_beyond_the_drain_bound_is_left_recoverable_by_its_lease() -> None:
    w = World()
    job = await w.receive()
    stop = anyio.Event()

    async def hang(request: ModelRequest) -> ModelReply:
        stop.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    w.model.script.append(hang)
    with anyio.fail_after(HANG_S):
        report = await jobs_cli.work_loop(w.ctx("w1"), stop, idle_s=0.01, drain_s=0.1)
    assert report.abandoned
    left = await w.job(job.id)
    assert (left.lease_owner, left.fence, left.model_calls_reserved) == ("w1", 1, 1)
    assert left.state is JobState.QUEUED
    assert await run_once(w.ctx("w2")) is None  # the lease is still live
    w.clock.advance(90)
    taken = await run_once(w.ctx("w2"))
    assert taken is not None and taken.state is JobState.PUBLISHED and taken.fence == 2
    kinds = [e.kind.value for e in await w.store.attempts(job.id)]
    assert kinds == ["started", "expired_lease", "started", "completed"]


@pytest.mark.anyio
async def test_a_storage_failure_ends_the_loop_with_its_error() -> None:
    w = World()

    async def broken(ctx: WorkerContext) -> object:
        raise LedgerUnavailable("connection lost")

    with anyio.fail_after(HANG_S), pytest.raises(LedgerUnavailable):
        await jobs_cli.work_loop(w.ctx(), anyio.Event(), idle_s=0.01, step=broken)


# -- exit statuses ------------------------------------------------------------------


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["jobs", "work", *args])
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--workspace", WS], "exactly one of --dsn"),
        (["--workspace", WS, "--memory", "--dsn", "postgresql://x"], "exactly one of --dsn"),
        (["--workspace", "", "--memory"], "--workspace must be a non-empty name"),
        (["--workspace", " acme", "--memory"], "--workspace must be a non-empty name"),
        (["--workspace", WS, "--memory", "--model", "gpt"], "unknown model 'gpt'"),
        (["--workspace", WS, "--memory", "--idle", "0"], "--idle must be positive"),
        (["--workspace", WS, "--memory", "--worker-id", " "], "--worker-id must not be empty"),
    ],
)
def test_a_bad_argument_exits_2_with_one_line(args: list[str], says: str) -> None:
    code, output = invoke(*args)
    assert code == 2
    (line,) = output.strip().splitlines()
    assert line.startswith("vessel: ") and says in line


def test_an_unreachable_database_is_a_configuration_failure() -> None:
    code, output = invoke("--workspace", WS, "--dsn", "postgresql://postgres@127.0.0.1:1/none")
    assert code == 2
    (line,) = output.strip().splitlines()
    assert "cannot connect to PostgreSQL" in line


def test_a_storage_failure_while_working_exits_1(monkeypatch: pytest.MonkeyPatch) -> None:
    class Failing(MemoryJobStore):
        async def claim_one(
            self, workspace: str, worker_id: str, now: object, lease_s: float
        ) -> LeasedJob | None:
            raise LedgerUnavailable("ledger transaction failed: server closed the connection")

    @asynccontextmanager
    async def failing_store(dsn: str | None) -> AsyncIterator[JobStore]:
        yield Failing()

    monkeypatch.setattr(jobs_cli, "open_store", failing_store)
    code, output = invoke("--workspace", WS, "--memory")
    assert code == 1
    lines = [line for line in output.strip().splitlines() if line.startswith("vessel:")]
    assert lines == [
        "vessel: storage failure, stopping: LedgerUnavailable: "
        "ledger transaction failed: server closed the connection"
    ]


# -- the real process -------------------------------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_real_worker_with_exit_0(signum: signal.Signals) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "runtime.app.cli", "jobs", "work", "--memory", "--workspace", WS],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stderr is not None
        ready = proc.stderr.readline()
        assert "ready: workspace acme" in ready, ready
        proc.send_signal(signum)
        _, rest = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, rest
    assert f"received {signum.name}" in rest and "stopped after 0 attempt(s)" in rest
