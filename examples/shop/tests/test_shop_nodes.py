"""One node at a time: `run_node` runs the checkout's `charge` under virtual time
(the provider's latencies cost no wall time) with the shop's own systems."""

from __future__ import annotations

from shop.checkout import Order
from shop.sim import app, buggy_app

from harness.api import run_node
from runtime.graph.transitions import AwaitConsent, Goto

ORDER = {"order": "o-1", "amount_cents": 1_000}
LOST_FIRST_ANSWER = 4
"""A seed whose first charge answers are lost while faults are on."""


def test_a_small_order_is_charged_then_shipped() -> None:
    run = run_node(app, "checkout", "charge", ORDER)
    assert isinstance(run.state, Order) and run.state.charge_id == "ch_1"
    assert run.transition == Goto("ship")


def test_a_big_order_waits_for_approval() -> None:
    run = run_node(app, "checkout", "review", {"order": "o-2", "amount_cents": 90_000})
    assert isinstance(run.transition, AwaitConsent)


def test_a_retried_charge_with_its_key_charges_once() -> None:
    run = run_node(app, "checkout", "charge", ORDER, seed=LOST_FIRST_ANSWER, faults=True)
    assert run.sometimes["a charge is retried after a lost answer"]
    assert len(run.service("payments").charges) == 1


def test_the_buggy_retry_charges_again() -> None:
    run = run_node(buggy_app, "checkout", "charge", ORDER, seed=LOST_FIRST_ANSWER,
                   faults=True)
    assert len(run.service("payments").charges) > 1
