"""Hypothesis strategies for fault plans over the catalogued points.

`fault_plans()` draws over every catalogued point; `fault_plans(app)` only over
the points one calm simulation of the app actually hit (and no further than
the hits it counted), so the plans strike its own windows:

    @given(plan=fault_plans(app))
    def test_checkout_survives(plan):
        assert simulate(app, 1, "calm", plan).ok

Hypothesis then shrinks a failing plan and prints it as a FaultPlan(...) value.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hypothesis import strategies as st

from runtime.faults import CATALOGUE
from sim.faults.plan import AtPoint, AtTime, FaultKind, FaultPlan, PlannedFault

if TYPE_CHECKING:
    from harness.api import App

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
def planned_faults(draw: st.DrawFn, max_nth: int = 20,
                   hits: dict[str, int] | None = None, horizon_s: float = 300.0
                   ) -> PlannedFault:
    """One fault; with `hits`, only at those points and within their hit counts."""
    crash_points = sorted(p for p in CATALOGUE if hits is None or hits.get(p))
    seam_points = sorted(p for p in SEAM_POINTS if hits is None or hits.get(p))

    def nth(point: str) -> int:
        return draw(st.integers(1, max_nth if hits is None else max(1, hits[point])))

    if crash_points and (not seam_points or draw(st.booleans())):
        point = draw(st.sampled_from(crash_points))
        return PlannedFault(trigger=AtPoint(point=point, nth=nth(point)), fault=FaultKind.CRASH)
    if not seam_points or draw(st.integers(0, 9)) == 0:
        return PlannedFault(trigger=AtTime(at=draw(st.floats(0, horizon_s))),
                            fault=FaultKind.CRASH)
    point = draw(st.sampled_from(seam_points))
    kind = draw(st.sampled_from(SEAM_POINTS[point]))
    amount = draw(st.floats(0, 5)) if kind in (
        FaultKind.LEDGER_LATENCY, FaultKind.DELAYED_DELIVERY) else 0.0
    return PlannedFault(
        trigger=AtPoint(point=point, nth=nth(point)), fault=kind, amount=round(amount, 3),
    )


_HITS: dict[tuple[str, str | None, int], tuple[dict[str, int], float]] = {}


def app_hits(app: App, seed: int = 1) -> tuple[dict[str, int], float]:
    """The points one calm simulation of `app` hit (with counts), and its virtual length."""
    key = (app.name, app.ref, seed)
    if key not in _HITS:
        from harness.api import simulate

        result = simulate(app, seed, "calm")
        hits = dict(result.sim_result().coverage["hits"])
        _HITS[key] = ({p: n for p, n in hits.items() if n}, result.virtual_s)
    return _HITS[key]


def fault_plans(app: App | None = None, max_faults: int = 8, seed: int = 1
                ) -> st.SearchStrategy[FaultPlan]:
    """Random fault plans: crashes at catalogued points or times, seam faults.

    With `app`, only the points a calm simulation of it under `seed` hit, no
    later than their hit counts, and time crashes within its virtual length.
    """
    if app is None:
        return st.lists(planned_faults(), max_size=max_faults).map(
            lambda found: FaultPlan(faults=found))

    def for_app() -> st.SearchStrategy[FaultPlan]:  # simulated at first draw, not at import
        hits, length = app_hits(app, seed)
        faults = planned_faults(hits=hits, horizon_s=max(1.0, length))
        return st.lists(faults, max_size=max_faults).map(lambda found: FaultPlan(faults=found))

    return st.deferred(for_app)
