"""`check(app, seeds, profile)`: a campaign that raises a readable AssertionError.

For test suites (the pytest fixture `vessel_sim` uses it): the error names the
first failing seed, its replay command, its shrunk fault plan as a list of
faults and the `harness shrink --emit-test` command, plus every `sometimes`
no seed saw true.
"""

from __future__ import annotations

from collections.abc import Iterable

from harness.api.results import CampaignResult
from harness.api.running import campaign, shrink, shrink_command
from harness.api.spec import App


class CampaignFailed(AssertionError):
    """A campaign of an app found a failing seed (or a sometimes never true)."""

    def __init__(self, message: str, result: CampaignResult) -> None:
        super().__init__(message)
        self.result = result


def check(app: App, seeds: Iterable[int], profile: str = "default", jobs: int = 1,
          require_sometimes: bool = True) -> CampaignResult:
    """Run the campaign; raise CampaignFailed explaining the first failure."""
    result = campaign(app, seeds, profile, jobs)
    lines: list[str] = []
    if result.failures:
        first = result.failures[0]
        lines.append(f"{app.name}: {len(result.failures)} of {len(result.seeds)} seeds failed "
                     f"({profile}); first: seed {first.seed} {first.verdict} "
                     f"[{first.invariant}] {first.message}")
        lines.append(f"  replay: {first.replay}")
        shrunk = shrink(app, first.seed, profile)
        if shrunk is not None:
            lines.append(f"  shrunk plan ({len(shrunk.plan.faults)} of {shrunk.faults_before} "
                         "faults):")
            lines.extend(f"    {pf.describe()}" for pf in shrunk.plan.faults)
            lines.append(f"  regression test: {shrink_command(app, first.seed, profile)}")
    if require_sometimes and result.never_true:
        lines.append(f"{app.name}: sometimes never true in {len(result.seeds)} seeds: "
                     f"{', '.join(result.never_true)}")
    if lines:
        raise CampaignFailed("\n".join(lines), result)
    return result
