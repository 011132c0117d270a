"""The shop under the simulator: the correct checkout keeps every invariant;
the buggy one (a charge retried without an idempotency key) is caught within a
few seeds, with its replay command, and its shrunk plan still fails."""

from __future__ import annotations

from shop.sim import app, buggy_app

from harness.api import campaign, shrink, simulate

SEEDS = range(1, 6)


def test_the_checkout_keeps_every_invariant() -> None:
    result = campaign(app, SEEDS, "default")
    assert not result.failures, [f.replay for f in result.failures]
    assert "a big order asks for approval" not in result.never_true


def test_the_non_idempotent_charge_is_caught_within_a_few_seeds() -> None:
    result = campaign(buggy_app, SEEDS, "default")
    caught = [f for f in result.failures if f.invariant == "charged_at_most_once"]
    assert caught, "the double charge went unnoticed"
    assert caught[0].seed <= 3
    assert caught[0].replay.startswith("harness replay --app ")


def test_a_seed_replays_identically_and_its_shrunk_plan_still_fails() -> None:
    first = simulate(buggy_app, 1)
    assert first.trace_hash == simulate(buggy_app, 1).trace_hash
    shrunk = shrink(buggy_app, 1)
    assert shrunk is not None and shrunk.invariant == "charged_at_most_once"
    assert not simulate(buggy_app, 1, plan=shrunk.plan).ok
    assert simulate(app, 1, plan=shrunk.plan).ok, "the fix holds under the same plan"
