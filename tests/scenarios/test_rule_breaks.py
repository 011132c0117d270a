"""The rule catalogue (sim.rules): complete, consistent with the code, and every
break it names is caught by its rule's invariants (issue M9).

Each break runs from the seed the catalogue records as its first catching swarm
seed until a seed catches it (usually that one), and the same seed must hold
without the break, so the violation is the break's and not the seed's. The
gate's break sweep measures seeds-to-detection from the start of the range; this
keeps CI to about two runs a break.
"""

from __future__ import annotations

import pytest

from harness import rules_report
from sim.kernel import run_simulation
from sim.rules import RULES, BreakRef, Rule, all_gaps

CASES = [pytest.param(rule, ref, id=f"{rule.id}:{ref.name}") for rule in RULES
         for ref in rule.breaks]


def test_every_rule_has_an_invariant_a_scenario_and_a_break_or_an_honest_reason() -> None:
    assert all_gaps() == {}
    rows = rules_report.validate()
    assert {r.rule.id: r.gaps for r in rows if r.gaps} == {}


def test_the_catalogue_names_only_things_that_exist() -> None:
    broken = Rule("x.bogus", "000", "nowhere", "a rule naming nothing real",
                  ("no_such_invariant",), ("no_such_scenario",), (BreakRef("no_such", "basic"),))
    unobservable = Rule("x.hidden", "000", "nowhere", "a rule only processes show",
                        unobservable="no simulator", covered_by=("tests/nope.py::test_nope",))
    rows = {r.rule.id: r.gaps for r in rules_report.validate([broken, unobservable])}
    assert rows["x.bogus"] == ["unknown invariant no_such_invariant",
                               "unknown scenario no_such_scenario", "unknown break no_such"]
    assert rows["x.hidden"] == ["covering test not found: tests/nope.py::test_nope"]


def test_rule_ids_are_unique_and_unobservable_rules_name_a_covering_test() -> None:
    ids = [r.id for r in RULES]
    assert len(ids) == len(set(ids))
    for rule in RULES:
        if not rule.observable:
            assert rule.covered_by and not rule.breaks, rule.id


SCAN = 25
"""Seeds tried from the catalogue's hint on: workloads change (other scenarios' draws
move), so the hint may drift; a break still uncaught SCAN seeds later fails."""


@pytest.mark.parametrize(("rule", "ref"), CASES)
def test_each_break_is_caught_by_its_rules_invariant(rule: Rule, ref: BreakRef) -> None:
    seen = []
    for seed in range(ref.seed, ref.seed + SCAN):
        broken = run_simulation(seed, ref.scenario, "swarm", break_name=ref.name)
        if broken.invariant in rule.invariants:
            break
        seen.append((seed, broken.invariant))
    else:
        raise AssertionError(f"{ref.name} not caught by {rule.invariants} from seed "
                             f"{ref.seed} on: {seen}")
    clean = run_simulation(seed, ref.scenario, "swarm")
    assert clean.ok, (seed, clean.invariant, clean.violation, clean.error)


def test_the_sweep_stops_at_the_first_catching_seed_and_reports_survivors() -> None:
    fast = Rule("t.priority", "000", "s", "priority", ("broker_priority",), ("basic",),
                (BreakRef("doctrine_priority", "basic"),))
    blind = Rule("t.blind", "000", "s", "a rule whose invariant cannot see the break",
                 ("hardware_budget",), ("basic",), (BreakRef("doctrine_priority", "basic"),))
    report = rules_report.sweep([1, 2, 3], max_seeds=2, rules=[fast, blind])
    caught, survived = report.results
    assert (caught.caught_at, caught.seeds_tried) == (1, 1)
    assert not survived.caught and survived.seeds_tried == 2
    assert survived.other == {"broker_priority": 2}
    assert [r.name for r in report.survivors] == ["doctrine_priority"]
    assert report.median_seeds() == 1



def test_the_sweep_budget_counts_real_seconds_under_its_held_freeze() -> None:
    # The sweep holds freezegun started across its simulations (sim.clock.held_freeze);
    # its budget must still read the real clock, or a spent budget would never show.
    fast = Rule("t.priority", "000", "s", "priority", ("broker_priority",), ("basic",),
                (BreakRef("doctrine_priority", "basic"),))
    blind = Rule("t.blind", "000", "s", "a rule whose invariant cannot see the break",
                 ("hardware_budget",), ("basic",), (BreakRef("doctrine_priority", "basic"),))
    report = rules_report.sweep([1, 2, 3], max_seeds=3, budget_s=0.05, rules=[blind, fast])
    spent, untried = report.results
    assert spent.seeds_tried >= 1 and spent.wall_s > 0.05
    assert untried.skipped and untried.seeds_tried == 0
    assert report.wall_s >= spent.wall_s

def test_harness_rules_prints_the_catalogue_and_exits_0_without_gaps() -> None:
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "harness.cli", "rules", "--json", "-"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["total"] == len(RULES) and doc["gaps"] == {}
    assert doc["complete"] + doc["unobservable"] == doc["total"]
    plain = subprocess.run([sys.executable, "-m", "harness.cli", "rules"],
                           capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0
    assert "shutdown.order" in plain.stdout and "unobservable" in plain.stdout
