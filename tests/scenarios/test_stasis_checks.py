"""The stasis outcome oracle (sim.stasis_checks) agrees with the runtime's own limits.

The checker keeps its own copies of the approval chain limit and the hardware
resume budget, so a mutant of the runtime's constants cannot move the oracle;
these tests pin the copies to the unmutated runtime.
"""

from __future__ import annotations

import pytest

from runtime.graph.budget import HardwareBudgetExhausted, HardwareResumeBudget
from runtime.stasis import waits
from sim import stasis_checks


def _runtime_overrun(needs: list[str]) -> str | None:
    budget = HardwareResumeBudget()
    for capability in needs:
        try:
            budget = budget.charge(capability)
        except HardwareBudgetExhausted as exc:
            return str(exc)
    return None


@pytest.mark.parametrize("needs", [
    [], ["gpu"], ["gpu"] * 3, ["gpu"] * 4, ["gpu", "tts"] * 4, ["gpu", "tts"] * 5,
    ["tts", "tts", "tts", "gpu", "tts", "tts", "tts", "tts"], ["vision"] * 10,
])
def test_the_budget_copy_fails_where_the_runtime_does(needs: list[str]) -> None:
    assert stasis_checks.budget_overrun(needs) == _runtime_overrun(needs)


def test_the_gate_copies_match_the_runtime() -> None:
    assert stasis_checks.MAX_CONSENT_ROUNDS == waits.MAX_CONSENT_ROUNDS
    assert stasis_checks.CHAIN_LIMIT == waits.CHAIN_LIMIT
    assert stasis_checks.SEVERAL_APPROVALS == waits.SEVERAL_APPROVALS
