"""Crash plans: parsing refuses what the catalogue does not name; the kill fires
at exactly the nth hit of exactly that point (DESIGN sections 5 and 7)."""

from __future__ import annotations

import pytest

from runtime import faults
from runtime.adapters.crashplan import ENV, CrashPlan, CrashPlanInvalid

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_plan_parses_point_and_optional_hit_count() -> None:
    assert CrashPlan.parse("claim.committed").nth == 1
    plan = CrashPlan.parse(" admit.committed:3 ")
    assert (plan.at, plan.nth) == ("admit.committed", 3)
    assert plan.describe() == "admit.committed:3"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("claim.comitted", "unknown fault point 'claim.comitted'"),
        ("claim.committed:x", "not an integer"),
        ("claim.committed:0", "1 or more"),
        ("claim.committed:-2", "1 or more"),
        (":1", "unknown fault point ''"),
    ],
)
def test_bad_plans_are_refused_with_one_line_naming_the_problem(text: str, words: str) -> None:
    with pytest.raises(CrashPlanInvalid) as info:
        CrashPlan.parse(text)
    message = str(info.value)
    assert words in message and "\n" not in message and message.startswith(ENV)


def test_no_variable_means_no_plan() -> None:
    assert CrashPlan.from_env({}) is None
    assert CrashPlan.from_env({ENV: "  "}) is None
    plan = CrashPlan.from_env({ENV: "settle.terminal_committed:2"})
    assert plan is not None and plan.nth == 2


async def test_kill_fires_at_exactly_the_nth_hit_of_that_point_only() -> None:
    kills: list[int] = []
    plan = CrashPlan.parse(f"{faults.CLAIM_COMMITTED}:3", kill=lambda: kills.append(1))
    await plan.point(faults.ADMIT_COMMITTED, run_id="r")
    await plan.point(faults.CLAIM_COMMITTED, run_id="r", seq=0)
    await plan.point(faults.CLAIM_COMMITTED, run_id="r", seq=0)
    assert kills == []
    await plan.point(faults.CLAIM_COMMITTED, run_id="r", seq=0)
    assert kills == [1]
    await plan.point(faults.CLAIM_COMMITTED, run_id="r", seq=0)
    assert kills == [1] and plan.hits == 4
