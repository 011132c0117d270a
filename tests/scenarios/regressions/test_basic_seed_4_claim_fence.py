"""Regression: basic seed 4 once broke `claim_is_exact`.

Written by `harness shrink --emit-test`; replays the minimal fault plan and
asserts every invariant holds now.
"""

from sim.faults.plan import FaultPlan
from sim.kernel import run_simulation

PLAN = FaultPlan.model_validate_json(
    """{
    "faults": [
        {
            "trigger": {
                "kind": "point",
                "point": "broker.deliver",
                "nth": 1
            },
            "fault": "duplicate_delivery",
            "amount": 0.0
        }
    ]
}"""
)


def test_basic_seed_4_claim_is_exact_holds() -> None:
    result = run_simulation(4, 'basic', 'default', PLAN)
    assert result.ok, (result.invariant, result.violation, result.error)
