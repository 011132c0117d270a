"""Hypothesis strategies for fault plans over the catalogued points."""

from __future__ import annotations

from hypothesis import strategies as st

from runtime.faults import CATALOGUE
from sim.faults.plan import AtPoint, AtTime, FaultKind, FaultPlan, PlannedFault

SEAM_POINTS = {
    "broker.publish": (FaultKind.PUBLISH_FAIL, FaultKind.ACK_LOST, FaultKind.DELAYED_DELIVERY),
    "broker.deliver": (FaultKind.DUPLICATE_DELIVERY,),
    "ledger.claim_delivery": (
        FaultKind.LEDGER_TRANSIENT, FaultKind.LEDGER_AMBIGUOUS, FaultKind.LEDGER_LATENCY,
    ),
    "ledger.settle_run": (
        FaultKind.LEDGER_TRANSIENT, FaultKind.LEDGER_AMBIGUOUS, FaultKind.LEDGER_LATENCY,
    ),
    "ledger.admit_run": (
        FaultKind.LEDGER_TRANSIENT, FaultKind.LEDGER_AMBIGUOUS, FaultKind.LEDGER_LATENCY,
    ),
}


@st.composite
def planned_faults(draw: st.DrawFn, max_nth: int = 20) -> PlannedFault:
    if draw(st.booleans()):
        point = draw(st.sampled_from(sorted(CATALOGUE)))
        return PlannedFault(
            trigger=AtPoint(point=point, nth=draw(st.integers(1, max_nth))), fault=FaultKind.CRASH
        )
    if draw(st.integers(0, 9)) == 0:
        return PlannedFault(trigger=AtTime(at=draw(st.floats(0, 300))), fault=FaultKind.CRASH)
    point = draw(st.sampled_from(sorted(SEAM_POINTS)))
    kind = draw(st.sampled_from(SEAM_POINTS[point]))
    amount = draw(st.floats(0, 5)) if kind in (
        FaultKind.LEDGER_LATENCY, FaultKind.DELAYED_DELIVERY) else 0.0
    return PlannedFault(
        trigger=AtPoint(point=point, nth=draw(st.integers(1, max_nth))), fault=kind,
        amount=round(amount, 3),
    )


def fault_plans(max_faults: int = 8) -> st.SearchStrategy[FaultPlan]:
    """Random fault plans: crashes at catalogued points or times, seam faults."""
    return st.lists(planned_faults(), max_size=max_faults).map(
        lambda faults: FaultPlan(faults=faults)
    )
