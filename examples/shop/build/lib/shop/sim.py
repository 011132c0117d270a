"""The shop under the simulator: `app` (correct) and `buggy_app` (no idempotency key).

    harness campaign --app shop.sim:app --seeds 1-50
    harness campaign --app shop.sim:buggy_app --seeds 1-10     # caught in a few seeds
"""

from __future__ import annotations

import random
from typing import Any

from harness.api import App, Approvers, Arrival, Env, Invariant, View, Workload
from runtime.models import ConsentStatus, RunStatus
from runtime.registry import WorkflowRegistry
from shop.checkout import APPROVAL_LIMIT_CENTS, checkout_registry
from shop.systems import PaymentProvider, Warehouse, payments, warehouse


def order(rng: random.Random, i: int) -> dict[str, Any]:
    """An order: mostly small baskets, now and then one that needs approval."""
    big = rng.random() < 0.25
    amount = rng.randint(APPROVAL_LIMIT_CENTS + 1, 4 * APPROVAL_LIMIT_CENTS) if big \
        else rng.randint(500, APPROVAL_LIMIT_CENTS)
    return {"order": f"o-{i}", "amount_cents": amount}


WORKLOAD = Workload(
    arrivals=(Arrival("checkout", order, keyed=0.7, sessions=("web", "app")),),
    count=(6, 16),
    approvers=Approvers(approve=0.8),
)


def charged_at_most_once(view: View) -> str | None:
    pay: PaymentProvider = view.service("payments")
    seen: dict[str, int] = {}
    for c in pay.charges:
        seen[c.order] = seen.get(c.order, 0) + 1
    twice = sorted(o for o, n in seen.items() if n > 1)
    return f"orders charged more than once: {', '.join(twice)}" if twice else None


def shipped_only_if_paid(view: View) -> str | None:
    pay: PaymentProvider = view.service("payments")
    ship: Warehouse = view.service("warehouse")
    unpaid = sorted(o for o in ship.shipments if not pay.charges_of(o))
    return f"shipped without a charge: {', '.join(unpaid)}" if unpaid else None


def big_orders_approved(view: View) -> str | None:
    pay: PaymentProvider = view.service("payments")
    approved = {c.run_id for c in view.consents() if c.status is ConsentStatus.APPROVED}
    runs = {r.intent.content.get("order"): r.id for r in view.runs("checkout")}
    bad = sorted(c.order for c in pay.charges
                 if c.amount_cents > APPROVAL_LIMIT_CENTS and runs.get(c.order) not in approved)
    return f"charged above the limit without approval: {', '.join(bad)}" if bad else None


def done_means_shipped(view: View) -> str | None:
    ship: Warehouse = view.service("warehouse")
    for run in view.runs("checkout"):
        if run.status is RunStatus.DONE and (run.result or {}).get("status") == "shipped":
            order_id = str(run.intent.content["order"])
            if order_id not in ship.shipments:
                return f"Run {run.id} says {order_id} shipped; the warehouse has no shipment"
    return None


INVARIANTS = (
    Invariant("charged_at_most_once", charged_at_most_once, "a customer is charged at most "
              "once per order"),
    Invariant("shipped_only_if_paid", shipped_only_if_paid, "the warehouse ships paid orders"),
    Invariant("big_orders_approved", big_orders_approved, "an order above the limit is charged "
              "only after a person approved it"),
    Invariant("done_means_shipped", done_means_shipped, "a Run that says shipped was shipped",
              when="final"),
)

SERVICES = {"payments": payments, "warehouse": warehouse}


def _registry(idempotent: bool) -> Any:
    def build(env: Env) -> WorkflowRegistry:
        return checkout_registry(env.service("payments"), env.service("warehouse"), idempotent)

    return build


app = App(name="shop", registry=_registry(True), workload=WORKLOAD, invariants=INVARIANTS,
          services=SERVICES)

buggy_app = App(name="shop_buggy", registry=_registry(False), workload=WORKLOAD,
                invariants=INVARIANTS, services=SERVICES)
"""Retries a charge whose answer was lost without an idempotency key."""
