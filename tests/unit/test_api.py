"""The public harness API (harness.api): an app's seeds are deterministic, its
assertions and invariants become named violations with replay commands, a
campaign reports sometimes() never true, shrink returns a typed plan, and
`--app` mistakes are one line with exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from harness import cli as harness_cli
from harness.api import (
    App,
    AppError,
    Arrival,
    FaultPlan,
    Workload,
    always,
    campaign,
    load_app,
    regression_test,
    replay,
    shrink,
    simulate,
    sometimes,
    unreachable,
)
from harness.api.probes import active
from harness.strategies import app_hits, fault_plans
from runtime.patterns import default_registry
from sim.faults.plan import AtPoint
from tests.unit import api_app

ROOT = Path(__file__).resolve().parents[2]


def test_an_app_seed_is_deterministic_and_holds() -> None:
    first = simulate(api_app.app, 4)
    again = simulate(api_app.app, 4)
    assert first.ok, first.explain()
    assert first.trace_hash == again.trace_hash
    assert first.trace() == again.trace()
    assert first.runs >= 4
    assert first.sometimes["the second letter is sent"] is True
    assert active() is None, "assertions are routed nowhere once a simulation ended"


def test_a_false_always_is_a_named_violation_with_its_replay() -> None:
    result = simulate(api_app.flaky_app, 1, "calm")
    assert result.verdict == "violation"
    assert result.invariant == "letters before the third"
    assert result.records == {"letter": "letter-2"}
    assert result.replay == ("harness replay --app tests.unit.api_app:flaky_app --seed 1 "
                             "--profile calm")


def test_reaching_unreachable_is_a_violation() -> None:
    result = simulate(api_app.unreachable_app, 1, "calm")
    assert (result.verdict, result.invariant) == ("violation", "the third letter")


def test_a_check_that_raises_fails_under_its_own_name() -> None:
    result = simulate(api_app.broken_check_app, 1, "calm")
    assert result.invariant == "raises"
    assert "KeyError" in str(result.message)


def test_a_campaign_reports_sometimes_never_true() -> None:
    result = campaign(api_app.never_app, [1, 2], "calm")
    assert not result.failures
    assert result.never_true == ["a letter is sent in a mode other than never"]
    assert not result.ok
    assert campaign(api_app.app, [1, 2], "calm").ok


def test_shrink_returns_a_typed_plan_and_the_emitted_test_imports_the_app(
        tmp_path: Path) -> None:
    found = shrink(api_app.flaky_app, 1, "default", save_to=tmp_path / "plan.json")
    assert found is not None
    assert found.invariant == "letters before the third"
    assert len(found.plan.faults) <= found.faults_before
    assert FaultPlan.load(tmp_path / "plan.json") == found.plan
    again = replay(api_app.flaky_app, 1, "default", tmp_path / "plan.json")
    assert again.invariant == found.invariant
    assert f"--plan {tmp_path / 'plan.json'}" in again.replay
    text = regression_test(api_app.flaky_app, found)
    assert "load_app('tests.unit.api_app:flaky_app')" in text
    assert shrink(api_app.app, 1, "calm") is None


def test_assertions_outside_a_simulation_only_return_their_condition() -> None:
    assert always(True, "x") is True
    assert always(0, "x") is False
    assert sometimes(1, "y") is True
    unreachable("z")  # no simulation: nothing to report to


def test_load_app_names_what_is_wrong() -> None:
    assert load_app("tests.unit.api_app:app") is api_app.app
    for ref, words in (("tests.unit.api_app", "module:attribute"),
                       ("tests.unit.nothing_here:app", "cannot import"),
                       ("tests.unit.api_app:nope", "no attribute"),
                       ("tests.unit.api_app:WORKLOAD", "not a harness.api.App")):
        with pytest.raises(AppError, match=words):
            load_app(ref)


def test_an_app_whose_workload_names_an_unregistered_pattern_is_refused() -> None:
    app = App(name="bad", registry=default_registry(),
              workload=Workload(arrivals=(Arrival("missing"),)))
    with pytest.raises(ValueError, match="'missing', which the registry lacks"):
        simulate(app, 1)


@pytest.mark.parametrize("command", ["campaign", "replay", "shrink"])
@pytest.mark.parametrize("ref", ["tests.unit.api_app", "no_such_pkg.sim:app",
                                 "tests.unit.api_app:nope", "tests.unit.api_app:WORKLOAD"])
def test_a_bad_app_is_one_line_and_exit_2(
        command: str, ref: str, capsys: pytest.CaptureFixture[str]) -> None:
    args = [command, "--app", ref, *([] if command == "campaign" else ["--seed", "1"])]
    with pytest.raises(SystemExit) as info:
        harness_cli.main(args)
    captured = capsys.readouterr()
    assert info.value.code == 2, captured
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --app"), captured.err
    assert captured.out == ""


def test_the_cli_campaign_over_an_app_names_the_replay(tmp_path: Path) -> None:
    out = tmp_path / "c.json"
    done = subprocess.run(
        [sys.executable, "-m", "harness.cli", "campaign", "--app",
         "tests.unit.api_app:flaky_app", "--seeds", "1-2", "--profile", "calm",
         "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    assert "harness replay --app tests.unit.api_app:flaky_app --seed 1 --profile calm" \
        in done.stdout
    assert '"sometimes_never_true": []' in out.read_text()


pytest_plugins = ["pytester"]


def test_the_vessel_sim_fixture_fails_with_the_replay_and_the_shrunk_plan(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_mine='''
        from tests.unit import api_app

        def test_holds(vessel_sim):
            assert vessel_sim(api_app.app).run(2).ok
            vessel_sim(api_app.app).check([1, 2])

        def test_flaky(vessel_sim):
            vessel_sim(api_app.flaky_app).check([5, 6])
    ''')
    result = pytester.runpytest("-p", "no:cacheprovider", "--vessel-seeds", "1",
                                "--vessel-profile", "calm")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "*CampaignFailed: flaky_app: 1 of 1 seeds failed (calm); first: seed 1 violation "
        "[[]letters before the third[]]*",
        "*replay: harness replay --app tests.unit.api_app:flaky_app --seed 1 --profile calm",
        "*shrunk plan (0 of 0 faults):*",
        "*regression test: harness shrink --app tests.unit.api_app:flaky_app --seed 1*",
    ])


def test_a_bad_vessel_option_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_mine="def test_x(vessel_sim):\n    vessel_sim(None)\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "--vessel-profile", "stormy")
    assert "--vessel-profile 'stormy': expected one of calm, default, swarm" in \
        result.stderr.str() + result.stdout.str()


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=fault_plans(api_app.app))
def test_plans_drawn_for_an_app_strike_only_points_it_hits(plan: FaultPlan) -> None:
    hits, length = app_hits(api_app.app)
    for pf in plan.faults:
        if isinstance(pf.trigger, AtPoint):
            assert 1 <= pf.trigger.nth <= hits[pf.trigger.point]
        else:
            assert pf.trigger.at <= length
    result = simulate(api_app.app, 1, "calm", plan)
    assert result.ok, result.explain()
