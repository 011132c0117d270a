"""The two-Vessel receipt's verdict over the rows (harness.receipts.vessels): each
broken rule is named, and a clean outcome has no problem."""

from __future__ import annotations

from harness.receipts.vessels import Runs, two_vessel_problems

LIVE, DEAD = "boot-live", "boot-dead"


def clean() -> tuple[Runs, dict[str, int]]:
    runs: Runs = {"a": ("DONE", None, LIVE), "b": ("FAILED", "lost: boot gone", DEAD),
                  "c": ("DONE", None, DEAD)}
    return runs, {"a": 1, "b": 1, "c": 1}


def problems(runs: Runs, steps: dict[str, int]) -> list[str]:
    return two_vessel_problems(runs, steps, ["a", "b", "c"], LIVE, DEAD, {"b", "c"})


def test_a_clean_outcome_proves_the_check() -> None:
    assert problems(*clean()) == []


def test_each_broken_rule_is_named() -> None:
    runs, steps = clean()
    assert any("of the live Vessel was failed" in p
               for p in problems({**runs, "a": ("FAILED", "lost: x", LIVE)}, steps))
    assert any("none of the dead Vessel's" in p
               for p in problems({**runs, "b": ("DONE", None, DEAD)}, steps))
    assert any("the dead Vessel held ended RUNNING" in p
               for p in problems({**runs, "c": ("RUNNING", None, DEAD)}, steps))
    assert any("2 terminal Steps" in p for p in problems(runs, {**steps, "a": 2}))
    assert any("did not hold it" in p
               for p in problems({**runs, "b": ("FAILED", "boom", DEAD)}, steps))
