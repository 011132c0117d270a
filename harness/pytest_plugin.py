"""The pytest plugin (entry point pytest11).

Fixtures: `vessel_sim` puts an application (harness.api.App) under the
simulator: `vessel_sim(app).run(seed)` is one seed, `vessel_sim(app).check()`
a campaign that fails the test with the first failing seed's replay command
and shrunk plan. The decorator `@harness.vessel_sim.campaign(app, seeds=200)`
makes a whole test one such campaign. `--vessel-seeds` and `--vessel-profile`
override the seeds and profile of every check and decorated campaign; a bad
value is a usage error before any test runs. `simulate` runs a seeded simulation of a shipped
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


def pytest_configure(config: pytest.Config) -> None:
    """Check --vessel-seeds / --vessel-profile once and hand them to the decorator."""
    from harness import vessel_sim as decorator

    seeds = config.getoption("--vessel-seeds", default=None)
    profile = config.getoption("--vessel-profile", default=None)
    _checked(seeds, profile)
    config.stash[_BEFORE] = (decorator.session_seeds, decorator.session_profile)
    decorator.session_seeds, decorator.session_profile = seeds, profile


def pytest_unconfigure(config: pytest.Config) -> None:
    """Give back the options of any enclosing session (pytester runs one inside another)."""
    from harness import vessel_sim as decorator

    if _BEFORE in config.stash:
        decorator.session_seeds, decorator.session_profile = config.stash[_BEFORE]


_BEFORE = pytest.StashKey[tuple[str | None, str | None]]()


def _checked(seeds: str | None, profile: str | None) -> None:
    from sim.campaign import parse_seeds
    from sim.faults.options import PROFILES

    if seeds is not None:
        try:
            if not parse_seeds(seeds):
                raise ValueError("no seeds")
        except ValueError as exc:
            raise pytest.UsageError(f"--vessel-seeds {seeds!r}: {exc}") from None
    if profile is not None and profile not in PROFILES:
        raise pytest.UsageError(f"--vessel-profile {profile!r}: expected one of "
                                f"{', '.join(PROFILES)}")


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
    seeds = request.config.getoption("--vessel-seeds")
    profile = request.config.getoption("--vessel-profile")
    _checked(seeds, profile)

    def bind(app: App) -> VesselSim:
        return VesselSim(app, seeds, profile)

    return bind


@pytest.fixture
def simulate() -> Callable[..., Any]:
    """`simulate(seed, scenario, profile="default", plan=None)` -> SimResult."""
    from sim.kernel import run_simulation

    return run_simulation
