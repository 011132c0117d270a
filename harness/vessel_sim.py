"""`@vessel_sim.campaign(app, seeds=200)`: a pytest test that is a whole campaign.

    from harness import vessel_sim
    from shop.sim import app

    @vessel_sim.campaign(app, seeds=200)
    def test_checkout_survives_faults(result):
        assert result.seeds  # optional: the CampaignResult, for further checks

The decorated test runs the campaign (harness.api.checking.check) before its
own body; a failing seed fails the test with that seed's replay command, its
shrunk fault plan fault by fault and the `harness shrink --emit-test` command
that writes a regression test. A parameter named `result` receives the
CampaignResult; every other parameter is a pytest fixture as usual. The
session's `--vessel-seeds` and `--vessel-profile` (harness.pytest_plugin)
override `seeds` and `profile`.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from harness.api import App

F = TypeVar("F", bound=Callable[..., Any])

RESULT = "result"
"""The parameter of a decorated test that receives the CampaignResult."""

session_seeds: str | None = None
"""This pytest session's --vessel-seeds (set by the plugin), overriding every campaign."""
session_profile: str | None = None
"""This pytest session's --vessel-profile (set by the plugin)."""


def seeds_of(seeds: int | str | Iterable[int]) -> list[int]:
    """`200` -> seeds 1-200; `"5-9"` or `"1,4"` as the CLI reads them; a list as is."""
    from sim.campaign import parse_seeds

    if isinstance(seeds, bool):
        raise TypeError("seeds must be a count, a seed spec or seeds, not a bool")
    if isinstance(seeds, int):
        if seeds < 1:
            raise ValueError(f"seeds={seeds}: a count of seeds is at least 1")
        return list(range(1, seeds + 1))
    if isinstance(seeds, str):
        return parse_seeds(seeds)
    return list(seeds)


def campaign(app: App, seeds: int | str | Iterable[int] = 20, profile: str = "default",
             jobs: int = 1, require_sometimes: bool = True) -> Callable[[F], F]:
    """Make the decorated test run a campaign of `app` first (module docstring)."""
    from harness.api.running import _profile

    _profile(profile)
    seeds_of(seeds)  # a bad spec fails at collection, not when the test runs

    def decorate(test: F) -> F:
        signature = inspect.signature(test)
        wants_result = RESULT in signature.parameters

        @functools.wraps(test)
        def run(*args: Any, **kwargs: Any) -> Any:
            from harness.api.checking import check

            chosen = seeds_of(session_seeds) if session_seeds else seeds_of(seeds)
            result = check(app, chosen, session_profile or profile, jobs, require_sometimes)
            if wants_result:
                kwargs[RESULT] = result
            return test(*args, **kwargs)

        run.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[p for name, p in signature.parameters.items() if name != RESULT])
        return run  # type: ignore[return-value]

    return decorate
