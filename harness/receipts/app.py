"""Restart receipts for a user's own Patterns (`harness receipts --app mypkg.sim:app`).

The shipped windows (harness.receipts.windows) drive the shipped Patterns.
For an app, each window instead submits one *sample* Intent of the app's
workload, and both boots serve the app's registry (`vessel serve --app`).

Which sample reaches which window is learned from the simulator, which runs
the same runtime code: each sample is simulated alone under the calm profile
(one arrival, every consent approved, as boot 2 approves it), and the fault
points it hit say which windows its Run passes. A window is proved with the
first sample that reaches it; the cancel windows need a sample that parks on
a consent (they cancel it there), and a window whose prescribed end is DONE
needs a sample the calm simulation ended DONE. Windows no sample reaches get
a `missing` receipt saying so, never a failed one.

Samples are drawn deterministically from each Arrival (content under
`random.Random(i)` for the i-th draw), `SAMPLES_PER_ARRIVAL` per Arrival at
most, stopping once every chosen window has one.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import Any

from harness.api.spec import App, Approvers, Arrival, Workload
from harness.receipts.windows import WINDOWS, Window, into_by_cancel
from runtime import faults

SAMPLES_PER_ARRIVAL = 12
PARKS = faults.CONSENT_ROW_SAVED
"""The point a sample must hit to be cancelled while it waits on a consent."""


@dataclass(frozen=True)
class Sample:
    """One Intent of the app's workload and what its calm simulation did."""

    pattern: str
    content: dict[str, Any]
    hits: frozenset[str]
    final: str | None


def probe(app: App, arrival: Arrival, content: dict[str, Any]) -> Sample:
    """Simulate `content` alone (calm, approvals granted) and record the points it hit."""
    from harness.api.running import simulate

    alone = Workload(arrivals=(dataclasses.replace(arrival, content=content, keyed=1.0,
                                                   in_session=0.0, prioritised=0.0, held=0.0),),
                     count=(1, 1), replays=0.0, approvers=Approvers(approve=1.0))
    result = simulate(dataclasses.replace(app, name=f"{app.name}_sample", workload=alone,
                                          ref=app.ref), 1, "calm")
    raw = result.sim_result()
    runs = list(raw.world.ledger.run_table.values()) if raw.world is not None else []
    final = runs[0].status.value if len(runs) == 1 else None
    hits = frozenset(p for p, n in raw.coverage["hits"].items() if n)
    return Sample(arrival.pattern, content, hits, final if result.ok else None)


def reaches(window: Window, sample: Sample) -> bool:
    needed = PARKS if window.into is into_by_cancel else window.point
    if needed not in sample.hits:
        return False
    return window.expect != "DONE" or sample.final == "DONE"


def app_windows(app: App, names: list[str], everything: bool = False) -> list[Window]:
    """The windows to prove for `app`, each bound to the sample that reaches it.

    No names (or `everything`): every catalogued window. A window no sample
    reaches (or one no real process reaches) comes back with `unreachable`
    set, so its receipt is `missing` with the reason. KeyError names unknown
    windows.
    """
    if app.ref is None:
        raise ValueError(f"App {app.name} has no module:attribute ref for the Vessel to load")
    unknown = [n for n in names if n not in WINDOWS]
    if unknown:
        raise KeyError(f"unknown windows {unknown}; known windows: {', '.join(WINDOWS)}")
    wanted = list(WINDOWS.values()) if everything or not names else [WINDOWS[n] for n in names]
    chosen: dict[str, Window] = {}
    open_ = [w for w in wanted if w.unreachable is None]
    for arrival in app.workload.arrivals:
        for i in range(SAMPLES_PER_ARRIVAL):
            if not open_:
                break
            sample = probe(app, arrival, arrival.content_for(random.Random(i), i))
            for window in [w for w in open_ if reaches(w, sample)]:
                chosen[window.point] = dataclasses.replace(
                    window, pattern=sample.pattern, content=sample.content, app=app.ref)
                open_.remove(window)
    out = []
    for window in wanted:
        if window.point in chosen:
            out.append(chosen[window.point])
            continue
        reason = window.unreachable or (
            f"no sample of {app.name}'s workload reaches it in the simulator "
            f"({SAMPLES_PER_ARRIVAL} per Arrival, calm, approvals granted)")
        out.append(dataclasses.replace(window, app=app.ref, unreachable=reason))
    return out
