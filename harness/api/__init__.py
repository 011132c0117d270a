"""The public harness API: put your own workflows under the simulator.

Describe an application (`App`: your `WorkflowRegistry` of Patterns, the
external systems their nodes call, a `Workload`, your `Invariant`s), mark
properties in node code or checks with `always`, `sometimes` and
`unreachable`, then `simulate` one seed, run a `campaign` over many, `replay`
a failing seed and `shrink` its fault plan; `run_node` unit-tests one node
under virtual time. The CLI does the same with
`--app module:attribute` (docs/api.md is the reference).

Only the names in `__all__` are the stable API; everything under `sim.` and
`runtime.` internals may change between releases.
"""

from harness.api.emit import regression_test
from harness.api.nodes import NodeRun, run_node
from harness.api.probes import always, sometimes, unreachable
from harness.api.results import CampaignResult, SeedOutcome, ShrinkResult, SimulationResult
from harness.api.running import campaign, check_app, replay, shrink, simulate
from harness.api.spec import (
    App,
    AppError,
    Approvers,
    Arrival,
    Env,
    Invariant,
    View,
    Workload,
    load_app,
)
from sim.faults.plan import FaultPlan

__all__ = [
    "App",
    "AppError",
    "Approvers",
    "Arrival",
    "CampaignResult",
    "Env",
    "FaultPlan",
    "Invariant",
    "NodeRun",
    "SeedOutcome",
    "ShrinkResult",
    "SimulationResult",
    "View",
    "Workload",
    "always",
    "campaign",
    "check_app",
    "load_app",
    "regression_test",
    "replay",
    "run_node",
    "shrink",
    "simulate",
    "sometimes",
    "unreachable",
]
