"""The shop through the pytest plugin: the `vessel_sim` fixture and the
`@vessel_sim.campaign` decorator (seeds and profile overridable with
--vessel-seeds / --vessel-profile) and Hypothesis plans drawn over the points
the checkout actually hits (harness.strategies.fault_plans)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from shop.sim import app, buggy_app

from harness import vessel_sim
from harness.api import CampaignResult, FaultPlan, simulate
from harness.api.checking import CampaignFailed
from harness.strategies import fault_plans


def test_the_checkout_campaign_holds(vessel_sim: Any) -> None:
    vessel_sim(app).check(range(1, 4), require_sometimes=False)


@vessel_sim.campaign(app, seeds=4)
def test_the_checkout_campaign_as_a_decorated_test(result: CampaignResult) -> None:
    assert "a big order asks for approval" not in result.never_true


def test_the_buggy_checkout_fails_with_its_replay(vessel_sim: Any) -> None:
    with pytest.raises(CampaignFailed, match=r"(?s)charged_at_most_once.*harness replay --app"):
        vessel_sim(buggy_app).check(range(1, 3))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=fault_plans(app))
def test_the_checkout_survives_planned_crashes_in_its_own_windows(plan: FaultPlan) -> None:
    result = simulate(app, 1, "calm", plan)
    assert result.ok, result.explain()
