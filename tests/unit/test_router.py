"""QueueRouter and WorkflowRegistry: lane and doctrine priority from rules; overrides."""

from __future__ import annotations

import pytest

from runtime.errors import InvalidIntent, UnknownPattern
from runtime.models import Intent
from runtime.patterns import ECHO, TWO_STEP, default_registry
from runtime.registry import QueueRouter, Route, RoutingRule
from tests.unit.fakes import make_world, pattern_of


async def _noop(ctx: object, state: dict[str, object]) -> dict[str, object]:
    return state


def test_rules_choose_queue_and_priority() -> None:
    router = QueueRouter(
        rules=[RoutingRule(queue="rites", priority=80, pattern="two_step")],
        default=RoutingRule(queue="runs", priority=20),
    )
    assert router.route(Intent(pattern="two_step"), TWO_STEP) == Route("rites", 80)
    assert router.route(Intent(pattern="echo"), ECHO) == Route("runs", 20)


def test_first_matching_rule_wins_and_a_patternless_rule_matches_all() -> None:
    router = QueueRouter(
        rules=[
            RoutingRule(queue="rites", priority=10, pattern="echo"),
            RoutingRule(queue="runs", priority=90),
            RoutingRule(queue="rites", priority=5, pattern="two_step"),
        ]
    )
    assert router.route(Intent(pattern="echo"), ECHO) == Route("rites", 10)
    assert router.route(Intent(pattern="two_step"), TWO_STEP) == Route("runs", 90)


def test_intent_priority_overrides_the_rule() -> None:
    router = QueueRouter(rules=[RoutingRule(queue="rites", priority=80)])
    assert router.route(Intent(pattern="echo", priority=3), ECHO) == Route("rites", 3)
    assert router.route(Intent(pattern="echo", priority=0), ECHO) == Route("rites", 0)


def test_pattern_pinned_queue_overrides_the_rule_queue() -> None:
    pinned = pattern_of("bg", _noop, queue="rites")
    router = QueueRouter(rules=[RoutingRule(queue="runs", priority=70)])
    assert router.route(Intent(pattern="bg"), pinned) == Route("rites", 70)


@pytest.mark.parametrize("bad", [-1, 101])
def test_rule_priority_is_validated_to_0_100(bad: int) -> None:
    with pytest.raises(InvalidIntent) as info:
        RoutingRule(queue="runs", priority=bad)
    assert info.value.field == "priority"
    RoutingRule(queue="runs", priority=0)
    RoutingRule(queue="runs", priority=100)


@pytest.mark.parametrize("bad", [-1, 101])
def test_intent_priority_override_is_validated_to_0_100(bad: int) -> None:
    """Even an Intent that skipped model validation cannot route out of range."""
    router = QueueRouter()
    intent = Intent(pattern="echo").model_copy(update={"priority": bad})
    with pytest.raises(InvalidIntent) as info:
        router.route(intent, ECHO)
    assert info.value.field == "priority"


def test_registry_latest_and_pinned_versions() -> None:
    registry = default_registry()
    v2 = registry.register(pattern_of("echo", _noop, version=2))
    assert registry.latest("echo") is v2
    assert registry.pinned("echo", 1) is ECHO
    assert registry.pinned("echo", 3) is None
    with pytest.raises(UnknownPattern):
        registry.latest("nope")
    assert {"echo", "two_step"} <= set(registry.names())
    assert registry.names() == sorted(registry.names())


@pytest.mark.anyio
async def test_submit_records_the_routed_queue_and_priority_on_run_and_delivery() -> None:
    router = QueueRouter(rules=[RoutingRule(queue="rites", priority=85, pattern="echo")])
    w = make_world(router=router)
    sub = await w.engine.submit(Intent(pattern="echo"))
    assert (sub.run.queue, sub.run.priority) == ("rites", 85)
    assert (sub.delivery.queue, sub.delivery.priority) == ("rites", 85)
    assert w.broker.publishes[0]["queue"] == "rites"
    assert w.broker.publishes[0]["priority"] == 15
    assert sub.run.pattern_version == 1
