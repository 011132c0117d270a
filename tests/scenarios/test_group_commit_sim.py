"""The simulator drives the Step writer's group commit (runtime.events.writer) where a
scenario asks for it (`World.group_commit`, set by `events`), and only there: the
mutation tool found the whole grouping path unreached while every SimLedger lacked
`append_steps` (issue 18, M9)."""

from __future__ import annotations

from typing import Any

import pytest

from sim.faults.proxies import SimBatchLedger
from sim.kernel import run_simulation


@pytest.fixture
def group_sizes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    sizes: list[int] = []
    original = SimBatchLedger.append_steps  # type: ignore[attr-defined]

    async def counting(self: SimBatchLedger, run_id: Any, seq: int, items: Any,
                       now: Any) -> Any:
        sizes.append(len(items))
        return await original(self, run_id, seq, items, now)

    monkeypatch.setattr(SimBatchLedger, "append_steps", counting)
    return sizes


def test_events_scenario_writes_steps_in_groups(group_sizes: list[int]) -> None:
    result = run_simulation(1, "events", "swarm")
    assert result.ok, (result.invariant, result.error)
    assert group_sizes, "no Step went through append_steps"
    assert max(group_sizes) > 1, "every group held one Step: the grouping path is unreached"


def test_other_scenarios_keep_one_append_per_step(group_sizes: list[int]) -> None:
    result = run_simulation(1, "basic", "swarm")
    assert result.ok, (result.invariant, result.error)
    assert group_sizes == []
