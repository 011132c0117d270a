"""The pytest plugin (entry point pytest11).

Fixtures: `simulate` runs a seeded simulation and returns its result,
`sim_world_factory` builds a bare simulated world for direct driving; the
PostgreSQL fixtures come from harness.pg_fixtures. Strategies for fault
plans are in harness.strategies.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from harness.pg_fixtures import pg_dsn, pg_fresh_dsn, pg_server

__all__ = ["pg_dsn", "pg_fresh_dsn", "pg_server", "simulate"]


@pytest.fixture
def simulate() -> Callable[..., Any]:
    """`simulate(seed, scenario, profile="default", plan=None)` -> SimResult."""
    from sim.kernel import run_simulation

    return run_simulation
