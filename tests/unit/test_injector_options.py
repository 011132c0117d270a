"""Every fault kind names the option that gives its probability (sim.faults.injector):
a kind added without one would fail its first roll in the middle of a campaign."""

from __future__ import annotations

from sim.faults.injector import PROBABILITY_OPTION
from sim.faults.options import FaultOptions
from sim.faults.plan import FaultKind


def test_every_fault_kind_has_a_probability_option() -> None:
    assert set(PROBABILITY_OPTION) == set(FaultKind)
    fields = set(FaultOptions.model_fields)
    missing = {k.value: o for k, o in PROBABILITY_OPTION.items() if o not in fields}
    assert missing == {}
