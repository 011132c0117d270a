"""The regression test `harness shrink --app ... --emit-test` writes.

A standalone pytest module that imports the user's app by its
`module:attribute` reference, replays the shrunk fault plan under the same
seed and asserts every invariant holds: it fails while the bug is there and
passes once it is fixed.
"""

from __future__ import annotations

from harness.api.results import ShrinkResult
from harness.api.spec import App


def regression_test(app: App, result: ShrinkResult) -> str:
    if app.ref is None:
        raise ValueError(f"App {app.name} has no module:attribute ref to import it by")
    plan = result.plan.model_dump_json(indent=4)
    name = "".join(c if c.isalnum() else "_" for c in f"{app.name}_seed_{result.seed}_"
                   f"{result.invariant}")
    return f'''"""Regression: {app.name} seed {result.seed} once broke `{result.invariant}`.

Written by `harness shrink --app {app.ref} --emit-test`: replays the shrunk
fault plan ({len(result.plan.faults)} faults) and asserts every invariant holds.
Run it from the directory `harness campaign --app` ran in.
"""

from harness.api import FaultPlan, load_app, simulate

APP = load_app({app.ref!r})

PLAN = FaultPlan.model_validate_json(
    """{plan}"""
)


def test_{name}_holds() -> None:
    result = simulate(APP, {result.seed}, {result.profile!r}, PLAN)
    assert result.ok, result.explain()
'''
