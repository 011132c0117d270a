"""Admission rules of RunEngine.submit (seed 000, "Admission and exact claim", steps 1-4)."""

from __future__ import annotations

import anyio
import pytest

from runtime import faults
from runtime.adapters.memory import MemoryLedger
from runtime.engine import HEARTBEAT_S
from runtime.errors import LedgerUnavailable, RetentionFailed
from runtime.keys import hop_key
from runtime.models import DeliveryState, Intent, Run, RunStatus
from runtime.seams import JobStatus
from tests.unit.fakes import LedgerProxy, make_world

pytestmark = pytest.mark.anyio


async def test_admit_commits_queued_run_and_delivery_seq0_in_one_transaction() -> None:
    proxy = LedgerProxy(MemoryLedger())
    w = make_world(ledger=proxy)
    seen: dict[str, object] = {}

    def at_commit() -> None:
        dump = w.dump()
        seen["calls"] = list(proxy.calls)
        seen["runs"] = [(r.status, r.seq) for r in dump.runs]
        seen["deliveries"] = [(d.seq, d.state) for d in dump.deliveries]
        seen["jobs"] = dict(w.jobs())

    w.faults.observe(faults.ADMIT_COMMITTED, at_commit)
    await w.engine.submit(Intent(pattern="echo"))

    # The one write before the commit point is admit_run, and it wrote both records.
    assert seen["calls"] == ["admit_run"]
    assert seen["runs"] == [(RunStatus.QUEUED, 0)]
    assert seen["deliveries"] == [(0, DeliveryState.PENDING)]
    assert seen["jobs"] == {}


async def test_admission_without_retention_hook_is_pending() -> None:
    w = make_world()
    states: list[DeliveryState] = []
    w.faults.observe(
        faults.ADMIT_COMMITTED, lambda: states.extend(d.state for d in w.dump().deliveries)
    )
    sub = await w.engine.submit(Intent(pattern="echo"))
    assert states == [DeliveryState.PENDING]
    assert sub.created is True
    assert sub.run.status is RunStatus.QUEUED


async def test_admission_with_retention_hook_is_held_until_hook_completes() -> None:
    w = make_world()
    inside_hook: dict[str, object] = {}

    async def retain(run: Run) -> None:
        dump = w.dump()
        (delivery,) = dump.deliveries
        inside_hook.update(
            run=run.id, state=delivery.state, held_by=delivery.held_by,
            status=dump.runs[0].status, jobs=len(w.jobs()),
        )

    sub = await w.engine.submit(Intent(pattern="echo", sigil="alice"), retain)
    assert inside_hook == {
        "run": sub.run.id, "state": DeliveryState.HELD, "held_by": "alice",
        "status": RunStatus.QUEUED, "jobs": 0,
    }
    assert sub.delivery.state is DeliveryState.PUBLISHED
    assert sub.delivery.held_by is None


async def test_hook_then_held_released_to_pending_before_publish() -> None:
    proxy = LedgerProxy(MemoryLedger())
    w = make_world(ledger=proxy)
    order: list[str] = []

    async def retain(run: Run) -> None:
        order.append("hook")

    def at_release() -> None:
        (delivery,) = w.dump().deliveries
        order.append(f"released:{delivery.state}:jobs={len(w.jobs())}")

    w.faults.observe(faults.RELEASE_COMMITTED, at_release)
    await w.engine.submit(Intent(pattern="echo"), retain)
    assert order == ["hook", "released:PENDING:jobs=0"]
    assert proxy.calls == ["admit_run", "release_held", "mark_published"]


async def test_hook_failure_fails_only_that_held_generation() -> None:
    w = make_world()
    bystander = await w.engine.submit(Intent(pattern="echo", prompt="other"))

    async def retain(run: Run) -> None:
        raise ValueError("context store down")

    with pytest.raises(RetentionFailed, match="context store down"):
        await w.engine.submit(Intent(pattern="echo", prompt="mine"), retain)

    dump = w.dump()
    failed = next(r for r in dump.runs if r.id != bystander.run.id)
    assert failed.status is RunStatus.FAILED
    assert failed.error is not None and "retention failed" in failed.error
    assert w.ledger.delivery_table[(failed.id, 0)].state is DeliveryState.FAILED
    # The other admission is untouched and nothing was published for the failed one.
    assert w.ledger.run_table[bystander.run.id].status is RunStatus.QUEUED
    assert w.ledger.delivery_table[(bystander.run.id, 0)].state is DeliveryState.PUBLISHED
    assert list(w.jobs()) == [hop_key(bystander.run.id, 0)]


async def test_caller_cancelled_during_hook_fails_held_generation_and_propagates() -> None:
    w = make_world()
    reached_after_submit = False

    with anyio.CancelScope() as scope:

        async def retain(run: Run) -> None:
            scope.cancel()
            await anyio.sleep_forever()

        await w.engine.submit(Intent(pattern="echo"), retain)
        reached_after_submit = True

    assert scope.cancelled_caught, "the caller's cancellation must propagate, not be swallowed"
    assert not reached_after_submit
    (run,) = w.dump().runs
    (delivery,) = w.dump().deliveries
    assert run.status is RunStatus.FAILED
    assert delivery.state is DeliveryState.FAILED
    assert w.jobs() == {}


async def test_release_error_with_delivery_already_advanced_stays_admitted() -> None:
    proxy = LedgerProxy(MemoryLedger())
    proxy.fail_once("release_held", RuntimeError("connection reset after commit"), after=True)
    w = make_world(ledger=proxy)

    async def retain(run: Run) -> None:
        return None

    sub = await w.engine.submit(Intent(pattern="echo"), retain)

    assert sub.created is True
    assert sub.run.status is RunStatus.QUEUED
    assert sub.delivery.state is DeliveryState.PUBLISHED
    assert list(w.jobs()) == [hop_key(sub.run.id, 0)]
    assert "fail_held" not in proxy.calls


async def test_release_error_with_delivery_still_held_fails_it() -> None:
    proxy = LedgerProxy(MemoryLedger())
    proxy.fail_once("release_held", RuntimeError("connection reset before commit"), after=False)
    w = make_world(ledger=proxy)

    async def retain(run: Run) -> None:
        return None

    with pytest.raises(RetentionFailed):
        await w.engine.submit(Intent(pattern="echo"), retain)

    (run,) = w.dump().runs
    (delivery,) = w.dump().deliveries
    assert run.status is RunStatus.FAILED
    assert delivery.state is DeliveryState.FAILED
    assert w.jobs() == {}


async def test_publish_under_hop_key_with_inverted_broker_priority() -> None:
    w = make_world()
    sub = await w.engine.submit(Intent(pattern="echo", priority=30))
    key = f"run:{sub.run.id}:0"
    assert w.broker.publishes == [
        {"queue": "runs", "key": key, "run_id": sub.run.id, "seq": 0, "priority": 70,
         "heartbeat": HEARTBEAT_S}
    ]
    job = w.jobs()[key]
    assert (job.priority, job.seq, job.run_id, job.status) == (70, 0, sub.run.id, JobStatus.QUEUED)
    assert HEARTBEAT_S == 120


@pytest.mark.parametrize(("doctrine", "broker"), [(0, 100), (100, 0), (64, 36)])
async def test_broker_priority_is_100_minus_doctrine_priority(doctrine: int, broker: int) -> None:
    w = make_world()
    sub = await w.engine.submit(Intent(pattern="echo", priority=doctrine))
    assert w.jobs()[hop_key(sub.run.id, 0)].priority == broker


async def test_broker_ack_moves_delivery_to_published() -> None:
    w = make_world()
    states: list[DeliveryState] = []
    w.faults.observe(
        faults.PUBLISH_SENT_BEFORE_ACK,
        lambda: states.extend(d.state for d in w.dump().deliveries),
    )
    sub = await w.engine.submit(Intent(pattern="echo"))
    assert states == [DeliveryState.PENDING]  # the job exists, the ack is not recorded yet
    assert sub.delivery.state is DeliveryState.PUBLISHED
    assert w.ledger.delivery_table[(sub.run.id, 0)].state is DeliveryState.PUBLISHED


async def test_broker_error_leaves_run_queued_and_delivery_pending_and_recoverable() -> None:
    w = make_world()
    w.broker.fail_publish = True
    sub = await w.engine.submit(Intent(pattern="echo"))

    assert sub.created is True
    assert sub.run.status is RunStatus.QUEUED
    assert sub.delivery.state is DeliveryState.PENDING
    assert w.ledger.run_table[sub.run.id].status is RunStatus.QUEUED
    assert w.ledger.delivery_table[(sub.run.id, 0)].state is DeliveryState.PENDING
    assert w.jobs() == {}

    # Recoverable: the same exact hop can be published later under the same key.
    w.broker.fail_publish = False
    again = await w.engine.publish(w.ledger.delivery_table[(sub.run.id, 0)])
    assert again.state is DeliveryState.PUBLISHED
    assert list(w.jobs()) == [hop_key(sub.run.id, 0)]


async def test_hook_error_raised_while_caller_is_cancelled_fails_held_generation() -> None:
    w = make_world()

    async def retain(run: Run) -> None:
        scope.cancel()
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            raise RuntimeError("store lost the context while we were cancelled") from None

    with pytest.raises(RetentionFailed, match="store lost the context"):
        with anyio.CancelScope() as scope:
            await w.engine.submit(Intent(pattern="echo"), retain)

    (run,) = w.dump().runs
    (delivery,) = w.dump().deliveries
    assert (run.status, delivery.state) == (RunStatus.FAILED, DeliveryState.FAILED)
    assert w.jobs() == {}


async def test_held_generation_failed_by_another_owner_is_never_published() -> None:
    w = make_world()

    async def retain(run: Run) -> None:
        # Meanwhile recovery refuses the unresolved HELD admission.
        failed = await w.ledger.fail_held(run.id, 0, "refused by recovery", w.clock.now())
        assert failed is not None and failed.state is DeliveryState.FAILED

    with pytest.raises(RetentionFailed):
        await w.engine.submit(Intent(pattern="echo"), retain)

    (run,) = w.dump().runs
    assert run.status is RunStatus.FAILED and run.error == "refused by recovery"
    assert w.jobs() == {} and w.broker.publishes == []


async def test_caller_cancelled_during_publish_leaves_delivery_recoverable() -> None:
    w = make_world()
    publish = w.broker.publish

    async def hanging_publish(*args: object, **kwargs: object) -> bool:
        scope.cancel()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    w.broker.publish = hanging_publish  # type: ignore[method-assign]
    with anyio.CancelScope() as scope:
        await w.engine.submit(Intent(pattern="echo", idempotency_key="k"))
    assert scope.cancelled_caught

    (run,) = w.dump().runs
    (delivery,) = w.dump().deliveries
    assert (run.status, delivery.state) == (RunStatus.QUEUED, DeliveryState.PENDING)
    w.broker.publish = publish  # type: ignore[method-assign]
    again = await w.engine.submit(Intent(pattern="echo", idempotency_key="k"))
    assert again.delivery.state is DeliveryState.PUBLISHED
    assert list(w.jobs()) == [hop_key(run.id, 0)]


async def test_lost_publish_acknowledgement_is_recovered_without_a_second_job() -> None:
    proxy = LedgerProxy(MemoryLedger())
    proxy.fail_once("mark_published", RuntimeError("ack not recorded"), after=False)
    w = make_world(ledger=proxy)
    first = await w.engine.submit(Intent(pattern="echo", idempotency_key="k"))
    assert first.delivery.state is DeliveryState.PENDING  # the broker has the job, ledger not

    again = await w.engine.submit(Intent(pattern="echo", idempotency_key="k"))
    assert again.delivery.state is DeliveryState.PUBLISHED
    assert len(w.jobs()) == 1


async def test_admission_retried_after_an_ambiguous_commit_admits_once() -> None:
    proxy = LedgerProxy(MemoryLedger())
    proxy.fail_once("admit_run", LedgerUnavailable("reset after commit"), after=True)
    w = make_world(ledger=proxy)
    sub = await w.engine.submit(Intent(pattern="echo"))
    assert proxy.calls.count("admit_run") == 2
    assert sub.created is True, "this call did create the Run"
    assert len(w.dump().runs) == 1 and len(w.jobs()) == 1
