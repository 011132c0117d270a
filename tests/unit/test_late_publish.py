"""A publisher that loses its acknowledgement after cancellation fences the late job.

Seed 000_81a5c720b14d934a.txt, "Cancellation, mutation, and recovery": a
publish still in flight while the Run is cancelled lands behind the
canceller's parent fence. The publisher re-probes and aborts that exact hop
job (three tries), shielded from its caller's cancellation; a persistent
failure is not reported as containment and stays behind the claim CAS until
an explicit cancellation retries the abort.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from uuid import UUID

import anyio
import pytest

from runtime.cancel import Canceller
from runtime.errors import BrokerUnavailable
from runtime.keys import hop_key
from runtime.models import DeliveryState, Intent, RunStatus
from runtime.publish_fence import LATE_ABORT_ATTEMPTS, LateJob, fence_late_job, refence_cancelled
from runtime.recovery.reconcile import reconcile_runs
from runtime.seams import JobInfo, JobStatus
from runtime.worker import HopOutcome
from tests.unit.fakes import World, make_world

pytestmark = pytest.mark.anyio

Hook = Callable[[UUID], Awaitable[None]]


def in_flight(w: World, during: Hook, after: Hook | None = None, ack: bool = False) -> None:
    """Make every publish of `w` run `during` before its job lands, then `after`
    (default: the acknowledgement is lost) unless `ack`."""
    inner = w.broker.inner

    async def publish(queue: str, key: str, *, run_id: UUID, seq: int, priority: int,
                      heartbeat: int) -> bool:
        await during(run_id)
        created = await inner.publish(queue, key, run_id=run_id, seq=seq, priority=priority,
                                      heartbeat=heartbeat)
        if after is not None:
            await after(run_id)
        if not ack:
            raise BrokerUnavailable(f"acknowledgement of {key} lost (test)")
        return created

    w.broker.publish = publish  # type: ignore[method-assign]


def cancel_in(w: World) -> Hook:
    async def cancel(run_id: UUID) -> None:
        done = await Canceller(w.deps).cancel(run_id)
        assert done.status is RunStatus.CANCELLED  # the canceller probed before the landing

    return cancel


def job(w: World, run_id: UUID) -> JobInfo:
    return w.jobs()[hop_key(run_id, 0)]


async def submit(w: World) -> UUID:
    return (await w.engine.submit(Intent(pattern="echo", sigil="alice"))).run.id


async def test_a_publisher_that_loses_its_ack_after_cancellation_aborts_the_late_job() -> None:
    w = make_world()
    in_flight(w, cancel_in(w))

    run_id = await submit(w)

    assert w.dump().runs[0].status is RunStatus.CANCELLED
    late = job(w, run_id)
    assert late.status is JobStatus.ABORTED  # not left queued for a CANCELLED Run
    assert late.error == "cancelled: late publish"


async def test_a_late_job_acknowledged_after_cancellation_is_aborted_too() -> None:
    w = make_world()
    in_flight(w, cancel_in(w), ack=True)

    run_id = await submit(w)

    assert w.dump().deliveries[0].state is DeliveryState.FAILED
    assert job(w, run_id).status is JobStatus.ABORTED


async def test_a_job_landing_while_cancelling_after_the_parent_probe_is_aborted() -> None:
    w = make_world()

    async def begin_cancel(run_id: UUID) -> None:  # the canceller probed: nothing yet
        await w.deps.ledger.begin_cancel(run_id, w.clock.now())
        assert await w.broker.probe(hop_key(run_id, 0)) is None

    in_flight(w, begin_cancel, ack=True)
    run_id = await submit(w)

    assert w.dump().deliveries[0].state is DeliveryState.PENDING  # the ack lost to CANCELLING
    assert job(w, run_id).status is JobStatus.ABORTED
    done = await Canceller(w.deps).cancel(run_id)  # the canceller's own fence sees it gone
    assert done.status is RunStatus.CANCELLED


async def test_the_fence_completes_under_caller_cancellation_before_it_propagates() -> None:
    w = make_world()
    scope = anyio.CancelScope()
    inner_abort = w.broker.inner.abort

    async def disconnect(run_id: UUID) -> None:
        scope.cancel()  # the caller goes away while the acknowledgement is awaited
        await anyio.sleep_forever()

    async def slow_abort(key: str, reason: str) -> JobInfo | None:
        await anyio.sleep(0.01)  # cancelled at once unless the fence is shielded
        return await inner_abort(key, reason)

    w.broker.abort = slow_abort  # type: ignore[method-assign]
    in_flight(w, cancel_in(w), after=disconnect)
    reached_end = False
    with scope:
        await submit(w)
        reached_end = True

    assert not reached_end and scope.cancelled_caught  # the cancellation did propagate
    run_id = w.dump().runs[0].id
    assert job(w, run_id).status is JobStatus.ABORTED


async def test_a_persistent_abort_failure_is_not_containment_and_stays_fenced() -> None:
    w = make_world()
    inner_abort = w.broker.inner.abort
    aborts: list[str] = []

    async def lost_abort(key: str, reason: str) -> JobInfo | None:
        aborts.append(key)
        raise BrokerUnavailable("abort refused (test)")

    w.broker.abort = lost_abort  # type: ignore[method-assign]
    in_flight(w, cancel_in(w))
    run_id = await submit(w)
    delivery = w.dump().deliveries[0]

    assert len(aborts) == LATE_ABORT_ATTEMPTS
    assert await fence_late_job(w.deps, delivery) is LateJob.UNFENCED
    assert job(w, run_id).status is JobStatus.QUEUED
    assert await w.worker.perform_run(run_id, 0) is HopOutcome.SKIPPED  # the claim CAS

    w.broker.abort = inner_abort  # type: ignore[method-assign]
    again = await Canceller(w.deps).cancel(run_id)  # an explicit cancellation retries it
    assert again.status is RunStatus.CANCELLED
    assert job(w, run_id).status is JobStatus.ABORTED


async def test_a_lost_ack_of_a_run_still_queued_keeps_its_job_for_the_relay() -> None:
    w = make_world()

    async def nothing(run_id: UUID) -> None:
        return None

    in_flight(w, nothing)
    run_id = await submit(w)

    assert w.dump().runs[0].status is RunStatus.QUEUED
    assert job(w, run_id).status is JobStatus.QUEUED
    assert await fence_late_job(w.deps, w.dump().deliveries[0]) is LateJob.NOT_LATE


async def test_startup_reconciliation_retries_the_abort_of_a_late_job_still_queued() -> None:
    w = make_world()
    inner_abort = w.broker.inner.abort

    async def lost_abort(key: str, reason: str) -> JobInfo | None:
        raise BrokerUnavailable("abort refused (test)")

    w.broker.abort = lost_abort  # type: ignore[method-assign]
    in_flight(w, cancel_in(w))
    run_id = await submit(w)
    assert job(w, run_id).status is JobStatus.QUEUED  # every abort of the publisher failed

    w.broker.abort = inner_abort  # type: ignore[method-assign]
    await reconcile_runs(w.engine, w.clock.now(), Canceller(w.deps))
    assert job(w, run_id).status is JobStatus.ABORTED


async def test_startup_leaves_the_finished_job_of_a_cancelled_run_alone() -> None:
    w = make_world()
    run_id = await submit(w)
    await Canceller(w.deps).cancel(run_id)
    before = job(w, run_id)
    assert before.status is JobStatus.ABORTED
    assert await refence_cancelled(w.deps, w.dump().runs[0]) is LateJob.NOT_LATE
    assert job(w, run_id) == before
