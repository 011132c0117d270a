"""`@vessel_sim.campaign(app, seeds=N)` (harness.vessel_sim): a test that is a
campaign, failing with the first failing seed's replay command and shrunk
plan, overridden by --vessel-seeds / --vessel-profile (issue 16 item 3)."""

from __future__ import annotations

import pytest

from harness import vessel_sim
from tests.unit import api_app

pytest_plugins = ["pytester"]


@vessel_sim.campaign(api_app.app, seeds=2, profile="calm", require_sometimes=False)
def test_the_decorated_campaign_hands_its_result_and_keeps_fixtures(
        result: object, tmp_path: object) -> None:
    from harness.api import CampaignResult

    assert isinstance(result, CampaignResult) and result.ok
    assert [s.seed for s in result.seeds] == [1, 2]
    assert tmp_path is not None


def test_seed_specs() -> None:
    assert vessel_sim.seeds_of(3) == [1, 2, 3]
    assert vessel_sim.seeds_of("4-5,9") == [4, 5, 9]
    assert vessel_sim.seeds_of(range(7, 9)) == [7, 8]
    with pytest.raises(ValueError, match="at least 1"):
        vessel_sim.seeds_of(0)


def test_a_bad_profile_or_seed_spec_fails_at_decoration() -> None:
    with pytest.raises(ValueError, match="unknown profile 'stormy'"):
        vessel_sim.campaign(api_app.app, profile="stormy")
    with pytest.raises(ValueError):
        vessel_sim.campaign(api_app.app, seeds="x-y")


def test_a_failing_decorated_campaign_reports_replay_and_shrunk_plan(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_mine='''
        from harness import vessel_sim
        from tests.unit import api_app

        @vessel_sim.campaign(api_app.flaky_app, seeds=200)
        def test_flaky():
            raise AssertionError("the body runs only after the campaign held")

        @vessel_sim.campaign(api_app.app, seeds="1-200", require_sometimes=False)
        def test_holds(result):
            assert [s.seed for s in result.seeds] == [3]
            assert result.profile == "calm"
    ''')
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--vessel-seeds", "3",
                                          "--vessel-profile", "calm")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "*CampaignFailed: flaky_app: 1 of 1 seeds failed (calm); first: seed 3 violation "
        "[[]letters before the third[]]*",
        "*replay: harness replay --app tests.unit.api_app:flaky_app --seed 3 --profile calm",
        "*shrunk plan (0 of 0 faults):*",
        "*regression test: harness shrink --app tests.unit.api_app:flaky_app --seed 3*",
    ])
    assert "the body runs only" not in result.stdout.str()
    assert vessel_sim.session_seeds is None and vessel_sim.session_profile is None


def test_a_bad_vessel_seeds_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_mine="def test_x():\n    pass\n")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--vessel-seeds", "9-1")
    assert "--vessel-seeds '9-1'" in result.stderr.str() + result.stdout.str()
    assert result.ret != 0
