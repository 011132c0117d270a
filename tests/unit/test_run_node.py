"""`run_node` (harness.api.nodes): one node under virtual time with a real
HopContext over an in-memory world (issue 16 item 3, virtual-time helpers)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest

from harness.api import always, run_node, unreachable
from runtime.graph.transitions import AwaitConsent, End, Goto
from runtime.hop import HopContext
from runtime.models import ConsentStatus
from runtime.registry import Node, Pattern, WorkflowRegistry
from sim.clock import EPOCH
from tests.unit import api_app


async def wait_an_hour(ctx: HopContext, state: dict[str, Any]) -> dict[str, Any]:
    await anyio.sleep(3600)
    await ctx.token("tick")
    applied = await ctx.effect("notify", {"who": state["who"]})
    again = await ctx.effect("notify", {"who": state["who"]})
    return {**state, "at": datetime.now(UTC).isoformat(), "applied": [applied, again],
            "now": ctx.deps.clock.now().isoformat()}


async def gate(ctx: HopContext, state: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    if ctx.consent is None:
        return state, AwaitConsent(then="gate", prompt="ok?")
    always(state.get("who") != "mallory", "mallory is never let through")
    if ctx.consent.status is ConsentStatus.DENIED:
        unreachable("a denied gate")
    return state, End(result={"by": ctx.consent.decided_by})


async def last(ctx: HopContext, state: dict[str, Any]) -> dict[str, Any]:
    return {**state, "done": True}


def registry() -> WorkflowRegistry:
    reg = WorkflowRegistry()
    reg.register(Pattern(name="hourly", version=1,
                         nodes=(Node("wait", wait_an_hour), Node("gate", gate),
                                Node("last", last))))
    return reg


def test_an_hour_of_sleep_is_virtual_and_now_reads_virtual_time() -> None:
    run = run_node(registry(), "hourly", "wait", {"who": "ann"})
    later = EPOCH + timedelta(hours=1)
    assert run.virtual_s == 3600
    assert datetime.fromisoformat(run.state["at"]) == later
    assert datetime.fromisoformat(run.state["now"]) == later
    assert run.transition == Goto("gate")  # returned only a state: the next node
    assert run.tokens == ["tick"]
    assert run.state["applied"] == [True, False]  # one effect per identity
    assert list(run.effects.values()) == [{"who": "ann"}]


def test_consent_and_transitions() -> None:
    asked = run_node(registry(), "hourly", "gate", {"who": "ann"})
    assert isinstance(asked.transition, AwaitConsent)
    approved = run_node(registry(), "hourly", "gate", {"who": "ann"},
                        consent=ConsentStatus.APPROVED, seq=1)
    assert approved.transition == End(result={"by": "approver"})
    assert run_node(registry(), "hourly", "last", {}).transition == End(
        result={"done": True})


def test_a_false_always_or_a_reached_unreachable_fails_the_call() -> None:
    with pytest.raises(AssertionError, match=r"always\(mallory is never let through\) was false"):
        run_node(registry(), "hourly", "gate", {"who": "mallory"},
                 consent=ConsentStatus.APPROVED)
    with pytest.raises(AssertionError, match=r"unreachable\(a denied gate\) was reached"):
        run_node(registry(), "hourly", "gate", {"who": "ann"}, consent=ConsentStatus.DENIED)


def test_an_apps_systems_are_built_and_readable_afterwards() -> None:
    run = run_node(api_app.app, "letter", "send", {"letter": "letter-1"}, seed=3)
    assert run.service("post").delivered == {"letter-1": 1}
    assert 0.1 <= run.virtual_s <= 1.0
    assert run.sometimes["the second letter is sent"] is True
    again = run_node(api_app.app, "letter", "send", {"letter": "letter-1"}, seed=3)
    assert again.virtual_s == run.virtual_s  # the same seed, the same latencies


def test_a_node_that_never_returns_times_out_in_virtual_time() -> None:
    async def forever(ctx: HopContext, state: dict[str, Any]) -> dict[str, Any]:
        await anyio.sleep_forever()
        return state

    reg = WorkflowRegistry()
    reg.register(Pattern(name="stuck", version=1, nodes=(Node("forever", forever),)))
    with pytest.raises(TimeoutError):
        run_node(reg, "stuck", "forever", {}, timeout_s=60)
    with pytest.raises(KeyError, match="no node 'nope'"):
        run_node(reg, "stuck", "nope", {})
