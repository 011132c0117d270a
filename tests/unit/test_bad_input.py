"""Bad input to submit: a typed error naming field and reason, and nothing left behind.

Each test asserts the ledger dump and the broker are exactly as they were
before the refused call (empty, or holding only the earlier admission).
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from runtime.errors import IdempotencyConflict, InvalidIntent, UnknownPattern
from runtime.models import Intent
from runtime.registry import QueueRouter, RoutingRule
from tests.unit.fakes import World, make_world

pytestmark = pytest.mark.anyio


def assert_nothing_written(w: World) -> None:
    dump = w.dump()
    assert dump.runs == [] and dump.deliveries == [] and dump.steps == []
    assert w.jobs() == {}
    assert w.broker.publishes == []


def test_intent_model_rejects_out_of_range_priority_naming_the_field() -> None:
    for bad in (-1, 101):
        with pytest.raises(ValidationError) as info:
            Intent(pattern="echo", priority=bad)
        assert info.value.errors()[0]["loc"] == ("priority",)


def test_intent_model_rejects_an_empty_idempotency_key_naming_the_field() -> None:
    for bad in ("", "   "):
        with pytest.raises(ValidationError) as info:
            Intent(pattern="echo", idempotency_key=bad)
        err = info.value.errors()[0]
        assert err["loc"] == ("idempotency_key",)
        assert "must not be empty" in err["msg"]


@pytest.mark.parametrize("priority", [-1, 101, 1000])
async def test_submit_refuses_out_of_range_priority(priority: int) -> None:
    w = make_world()
    # model_copy skips validation: submit must not trust a pre-built Intent.
    intent = Intent(pattern="echo").model_copy(update={"priority": priority})
    with pytest.raises(InvalidIntent) as info:
        await w.engine.submit(intent)
    assert info.value.field == "priority"
    assert "0-100" in info.value.reason
    assert_nothing_written(w)


async def test_routing_rule_priority_out_of_range_is_refused_before_admission() -> None:
    with pytest.raises(InvalidIntent) as info:
        RoutingRule(queue="runs", priority=101)
    assert info.value.field == "priority"


async def test_submit_refuses_unknown_pattern() -> None:
    w = make_world()
    with pytest.raises(UnknownPattern) as info:
        await w.engine.submit(Intent(pattern="no_such_pattern", idempotency_key="k", session="s"))
    assert isinstance(info.value, InvalidIntent)
    assert info.value.field == "pattern"
    assert "no_such_pattern" in info.value.reason
    assert_nothing_written(w)


@pytest.mark.parametrize("key", ["", "   "])
async def test_submit_refuses_empty_idempotency_key(key: str) -> None:
    w = make_world()
    intent = Intent(pattern="echo").model_copy(update={"idempotency_key": key})
    with pytest.raises(InvalidIntent) as info:
        await w.engine.submit(intent)
    assert info.value.field == "idempotency_key"
    assert "empty" in info.value.reason
    assert_nothing_written(w)


@pytest.mark.parametrize(
    "change", [{"prompt": "different"}, {"content": {"x": 2}}, {"priority": 90}]
)
async def test_submit_refuses_key_reuse_with_different_content(change: dict[str, Any]) -> None:
    w = make_world()
    intent = Intent(pattern="echo", prompt="p", content={"x": 1}, idempotency_key="k")
    await w.engine.submit(intent)
    before, jobs, publishes = w.dump(), w.jobs(), list(w.broker.publishes)

    with pytest.raises(IdempotencyConflict) as info:
        await w.engine.submit(intent.model_copy(update=change))

    assert info.value.field == "idempotency_key"
    assert "'k'" in str(info.value) and "different content" in str(info.value)
    assert w.dump() == before
    assert w.jobs() == jobs
    assert w.broker.publishes == publishes


async def test_router_rule_with_unknown_queue_is_refused() -> None:
    with pytest.raises(InvalidIntent) as info:
        QueueRouter(rules=[RoutingRule(queue="bulk", priority=10)])
    assert info.value.field == "queue"
    assert "bulk" in info.value.reason
