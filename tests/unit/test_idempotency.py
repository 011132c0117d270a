"""Idempotent admission: deterministic ids, exact replay, conflicts, single-flight, custody."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import anyio
import pytest

from runtime import faults
from runtime.adapters.memory import MemoryLedger
from runtime.engine import Submission, idempotent_run_id
from runtime.errors import HeldWithoutOwner, IdempotencyConflict, ProcessCrashed
from runtime.keys import hop_key
from runtime.models import DeliveryState, Intent, Run, RunStatus
from runtime.registry import Pattern, QueueRouter, Route, WorkflowRegistry
from tests.unit.fakes import make_world

pytestmark = pytest.mark.anyio

BASE = Intent(
    pattern="echo",
    prompt="hello",
    source="bridge",
    sigil="alice",
    scopes=("read", "write"),
    content={"a": 1, "nested": {"b": [1, 2]}},
    session="s-1",
    priority=40,
    idempotency_key="turn-7",
)


class ExplodingRouter(QueueRouter):
    """A router that must never be consulted."""

    def route(self, intent: Intent, pattern: Pattern) -> Route:
        raise AssertionError("replay consulted the router")


def test_run_id_is_deterministic_uuid5_of_source_sigil_and_key() -> None:
    rid = idempotent_run_id(BASE)
    assert isinstance(rid, UUID) and rid.version == 5
    assert idempotent_run_id(BASE.model_copy()) == rid
    # Everything outside the scope and key leaves the id alone.
    assert idempotent_run_id(BASE.model_copy(update={"prompt": "other"})) == rid
    for change in ({"idempotency_key": "turn-8"}, {"sigil": "bob"}, {"source": "api"}):
        assert idempotent_run_id(BASE.model_copy(update=change)) != rid
    assert idempotent_run_id(BASE.model_copy(update={"idempotency_key": None})) is None


async def test_submit_uses_the_deterministic_run_id() -> None:
    w1, w2 = make_world(), make_world()
    s1 = await w1.engine.submit(BASE)
    s2 = await w2.engine.submit(BASE)
    assert s1.run.id == s2.run.id == idempotent_run_id(BASE)
    assert s1.run.idempotency_key == "turn-7"


async def test_exact_replay_returns_same_run_without_consulting_the_router() -> None:
    w = make_world()
    first = await w.engine.submit(BASE)
    # A later router and registry generation must not affect already admitted truth.
    w.engine.router = ExplodingRouter()
    w.engine.registry = WorkflowRegistry()

    again = await w.engine.submit(BASE.model_copy())

    assert again.created is False
    assert again.run.id == first.run.id
    assert again.run == w.ledger.run_table[first.run.id]
    assert len(w.dump().runs) == 1 and len(w.dump().deliveries) == 1
    assert list(w.jobs()) == [hop_key(first.run.id, 0)]


@pytest.mark.parametrize(
    "change",
    [
        {"session": "s-2"},
        {"session": None},
        {"prompt": "hello!"},
        {"scopes": ("read",)},
        {"content": {"a": 2, "nested": {"b": [1, 2]}}},
        {"priority": 41},
        {"priority": None},
        {"pattern": "two_step"},
    ],
    ids=lambda c: next(iter(c)) + "=" + repr(next(iter(c.values()))),
)
async def test_key_reuse_with_any_changed_field_is_a_conflict(change: dict[str, Any]) -> None:
    w = make_world()
    first = await w.engine.submit(BASE)
    before, jobs_before = w.dump(), w.jobs()

    with pytest.raises(IdempotencyConflict) as info:
        await w.engine.submit(BASE.model_copy(update=change))

    assert info.value.field == "idempotency_key"
    assert info.value.run_id == first.run.id
    assert "different content" in str(info.value)
    assert w.dump() == before
    assert w.jobs() == jobs_before


async def test_source_and_sigil_scope_the_key() -> None:
    """The same key under another source or sigil is another caller's key: a new Run."""
    w = make_world()
    first = await w.engine.submit(BASE.model_copy(update={"session": None}))
    other_sigil = await w.engine.submit(BASE.model_copy(update={"session": None, "sigil": "bob"}))
    other_source = await w.engine.submit(
        BASE.model_copy(update={"session": None, "source": "api"})
    )
    ids = {first.run.id, other_sigil.run.id, other_source.run.id}
    assert len(ids) == 3
    assert other_sigil.created and other_source.created
    # And the stored fingerprint covers them, so a colliding id could never replay.
    assert BASE.fingerprint() != BASE.model_copy(update={"sigil": "bob"}).fingerprint()
    assert BASE.fingerprint() != BASE.model_copy(update={"source": "api"}).fingerprint()


async def test_concurrent_same_key_submits_are_single_flight() -> None:
    w = make_world()
    hook_calls: list[UUID] = []
    results: list[Submission] = []

    async def retain(run: Run) -> None:
        hook_calls.append(run.id)
        await anyio.sleep(0.01)  # keep the first admission in flight while others arrive

    async def one() -> None:
        results.append(await w.engine.submit(BASE, retain))

    async with anyio.create_task_group() as tg:
        for _ in range(6):
            tg.start_soon(one)

    assert len({r.run.id for r in results}) == 1
    assert sorted(r.created for r in results) == [False] * 5 + [True]
    assert len(hook_calls) == 1
    assert len(w.dump().runs) == 1
    assert len(w.jobs()) == 1
    assert len(w.broker.publishes) == 1


async def test_replay_republishes_an_exact_pending_delivery() -> None:
    w = make_world()
    w.broker.fail_publish = True
    first = await w.engine.submit(BASE)
    assert first.delivery.state is DeliveryState.PENDING and w.jobs() == {}

    w.broker.fail_publish = False
    again = await w.engine.submit(BASE)

    assert again.created is False and again.run.id == first.run.id
    assert again.delivery.state is DeliveryState.PUBLISHED
    assert again.delivery.seq == 0
    assert list(w.jobs()) == [hop_key(first.run.id, 0)]


async def test_replay_only_observes_a_published_delivery() -> None:
    w = make_world()
    await w.engine.submit(BASE)
    publishes = len(w.broker.publishes)
    again = await w.engine.submit(BASE)
    assert again.delivery.state is DeliveryState.PUBLISHED
    assert len(w.broker.publishes) == publishes


async def test_replay_only_observes_a_claimed_delivery() -> None:
    w = make_world()
    first = await w.engine.submit(BASE)
    claim = await w.ledger.claim_delivery(first.run.id, 0, "boot-1", "tok", w.clock.now())
    assert claim.claimed
    publishes = len(w.broker.publishes)

    again = await w.engine.submit(BASE)

    assert again.delivery.state is DeliveryState.CLAIMED
    assert again.run.status is RunStatus.RUNNING
    assert len(w.broker.publishes) == publishes


async def _strand_held_admission() -> tuple[Any, UUID]:
    """Admit with a hook, then 'crash' right after the admission commit."""
    w = make_world()
    w.faults.raise_at(faults.ADMIT_COMMITTED, ProcessCrashed())

    async def never(run: Run) -> None:
        raise AssertionError("the crashed boot never reaches its hook")

    with pytest.raises(ProcessCrashed):
        await w.engine.submit(BASE, never)
    (delivery,) = w.dump().deliveries
    assert delivery.state is DeliveryState.HELD
    return w, delivery.run_id


async def test_replay_of_unresolved_held_admission_reruns_hook_and_releases() -> None:
    w, run_id = await _strand_held_admission()
    retained: list[UUID] = []

    async def retain(run: Run) -> None:
        retained.append(run.id)

    again = await w.engine.submit(BASE, retain)

    assert retained == [run_id]
    assert again.created is False
    assert again.delivery.state is DeliveryState.PUBLISHED
    assert list(w.jobs()) == [hop_key(run_id, 0)]


async def test_replay_of_held_admission_without_hook_raises_held_without_owner() -> None:
    w, run_id = await _strand_held_admission()
    before = w.dump()

    with pytest.raises(HeldWithoutOwner) as info:
        await w.engine.submit(BASE)

    assert (info.value.run_id, info.value.seq) == (run_id, 0)
    assert w.dump() == before  # custody is not silently handed out or destroyed
    assert w.jobs() == {}


async def test_two_vessels_racing_one_key_the_unheld_one_is_a_replay_of_the_held_one() -> None:
    """Two Vessels (two coordinators, one ledger) admit the same key at the same
    instant: the one with a retention hook commits HELD, the other brings no hook.
    Both build an equal Run; whichever commits second must not carry on as the
    creator (the bare one used to trip an assertion on the HELD delivery): it is a
    replay, refused as HeldWithoutOwner or given the committed Run back."""
    ledger = MemoryLedger()
    held_vessel, bare_vessel = make_world(ledger=ledger), make_world(ledger=ledger,
                                                                      boot_id="boot-2")
    intent = BASE.model_copy(update={"session": None})
    hook_may_finish = anyio.Event()
    outcomes: dict[str, object] = {}

    async def retain(run: Run) -> None:
        await hook_may_finish.wait()

    async def held() -> None:
        outcomes["held"] = await held_vessel.engine.submit(intent, retain)

    async def bare() -> None:
        try:
            outcomes["bare"] = await bare_vessel.engine.submit(intent)
        except HeldWithoutOwner as exc:
            outcomes["bare"] = exc
        hook_may_finish.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(held)
        tg.start_soon(bare)
    held_result, bare_result = outcomes["held"], outcomes["bare"]
    assert isinstance(held_result, Submission)
    if isinstance(bare_result, HeldWithoutOwner):  # the held admission committed first
        assert held_result.created
    else:  # the bare one did: the hook's caller gets that Run back as a replay
        assert isinstance(bare_result, Submission) and bare_result.created
        assert not held_result.created and held_result.run.id == bare_result.run.id
    assert [r.id for r in ledger.run_table.values()] == [idempotent_run_id(intent)]
