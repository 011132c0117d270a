"""The pytest plugin (entry point pytest11).

Fixtures: `vessel_sim` puts an application (harness.api.App) under the
simulator: `vessel_sim(app).run(seed)` is one seed, `vessel_sim(app).check()`
a campaign that fails the test with the first failing seed's replay command
and shrunk plan; `--vessel-seeds` and `--vessel-profile` override the seeds
and profile of every check. `simulate` runs a seeded simulation of a shipped
scenario and returns its result; the PostgreSQL fixtures come from
harness.pg_fixtures. Hypothesis strategies for fault plans are in
harness.strategies (`fault_plans(app)`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from harness.pg_fixtures import pg_dsn, pg_fresh_dsn, pg_server

if TYPE_CHECKING:
    from harness.api import App, CampaignResult, FaultPlan, SimulationResult

__all__ = ["VesselSim", "pg_dsn", "pg_fresh_dsn", "pg_server", "simulate", "vessel_sim"]

DEFAULT_SEEDS = "1-20"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("vessel", "vessel-harness simulator (harness.api)")
    group.addoption("--vessel-seeds", default=None, metavar="SEEDS",
                    help="seeds of every vessel_sim check: N-M, N or a comma list "
                         f"(default: each check's own, else {DEFAULT_SEEDS})")
    group.addoption("--vessel-profile", default=None, metavar="PROFILE",
                    help="fault profile of every vessel_sim run and check: calm, default "
                         "or swarm")


@dataclass(frozen=True)
class VesselSim:
    """An app bound to this session's --vessel-seeds / --vessel-profile."""

    app: App
    seeds: str | None
    profile: str | None

    def run(self, seed: int, profile: str = "default", plan: FaultPlan | None = None
            ) -> SimulationResult:
        """One seed (the session's --vessel-profile wins over `profile`)."""
        from harness.api import simulate

        return simulate(self.app, seed, self.profile or profile, plan)

    def check(self, seeds: Iterable[int] | str | None = None, profile: str = "default",
              jobs: int = 1, require_sometimes: bool = True) -> CampaignResult:
        """A campaign; fails the test with the first failure explained and shrunk."""
        from harness.api.checking import check
        from sim.campaign import parse_seeds

        spec = self.seeds or seeds or DEFAULT_SEEDS
        chosen = parse_seeds(spec) if isinstance(spec, str) else list(spec)
        return check(self.app, chosen, self.profile or profile, jobs, require_sometimes)


@pytest.fixture
def vessel_sim(request: pytest.FixtureRequest) -> Callable[[App], VesselSim]:
    """`vessel_sim(app).run(seed)` -> SimulationResult; `.check(seeds)` -> CampaignResult."""
    from sim.campaign import parse_seeds

    seeds = request.config.getoption("--vessel-seeds")
    profile = request.config.getoption("--vessel-profile")
    if seeds is not None:
        try:
            parse_seeds(seeds)
        except ValueError as exc:
            raise pytest.UsageError(f"--vessel-seeds: {exc}") from None
    if profile is not None:
        from sim.faults.options import PROFILES

        if profile not in PROFILES:
            raise pytest.UsageError(f"--vessel-profile {profile!r}: expected one of "
                                    f"{', '.join(PROFILES)}")

    def bind(app: App) -> VesselSim:
        return VesselSim(app, seeds, profile)

    return bind


@pytest.fixture
def simulate() -> Callable[..., Any]:
    """`simulate(seed, scenario, profile="default", plan=None)` -> SimResult."""
    from sim.kernel import run_simulation

    return run_simulation
