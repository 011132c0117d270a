"""The `checkout` Pattern: approve big orders, charge the card, ship.

Nodes: `review` asks a person to approve an order above APPROVAL_LIMIT_CENTS
(AwaitConsent) and otherwise goes straight to `charge`; `decided` reads the
stored verdict; `charge` charges the card through the provider, retrying a
charge whose answer was lost; `ship` hands the paid order to the warehouse.

The retry is only safe because every attempt carries the same idempotency key
(the Run's effect identity). `checkout_registry(..., idempotent=False)` builds
the deliberately buggy variant that retries without a key: a lost answer then
charges the customer twice, which the `charged_at_most_once` invariant catches.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from harness.api import always, sometimes
from runtime.graph.transitions import AwaitConsent, End, Goto
from runtime.hop import HopContext
from runtime.models import ConsentStatus
from runtime.registry import Node, Pattern, WorkflowRegistry
from shop.systems import PaymentProvider, ProviderTimeout, Warehouse

APPROVAL_LIMIT_CENTS = 50_000
CHARGE_ATTEMPTS = 3


class Order(BaseModel):
    model_config = ConfigDict(extra="forbid")

    order: str
    amount_cents: int
    charge_id: str | None = None
    shipment: str | None = None


def checkout_registry(payments: PaymentProvider, warehouse: Warehouse,
                      idempotent: bool = True) -> WorkflowRegistry:
    """A registry holding `checkout`, whose nodes call these systems."""

    async def review(ctx: HopContext, state: Order) -> tuple[Order, Any]:
        big = state.amount_cents > APPROVAL_LIMIT_CENTS
        sometimes(big, "a big order asks for approval")
        if big:
            return state, AwaitConsent(then="decided", prompt=f"approve order {state.order}?")
        return state, Goto("charge")

    async def decided(ctx: HopContext, state: Order) -> tuple[Order, Any]:
        assert ctx.consent is not None, "a resumed review carries its stored verdict"
        if ctx.consent.status is ConsentStatus.APPROVED:
            return state, Goto("charge")
        return state, End(result={"order": state.order, "status": "rejected"})

    async def charge(ctx: HopContext, state: Order) -> tuple[Order, Any]:
        key = ctx.effect_identity("charge") if idempotent else None
        for _ in range(CHARGE_ATTEMPTS):
            try:
                charge_id = await payments.charge(state.order, state.amount_cents, key)
            except ProviderTimeout:
                sometimes(True, "a charge is retried after a lost answer")
                continue
            return state.model_copy(update={"charge_id": charge_id}), Goto("ship")
        raise RuntimeError(f"the payment provider did not answer for {state.order} "
                           f"in {CHARGE_ATTEMPTS} attempts")

    async def ship(ctx: HopContext, state: Order) -> tuple[Order, Any]:
        always(state.charge_id is not None, "only paid orders ship", order=state.order)
        shipment = await warehouse.ship(state.order, str(state.charge_id))
        return state, End(result={"order": state.order, "status": "shipped",
                                  "charge": state.charge_id, "shipment": shipment})

    registry = WorkflowRegistry()
    registry.register(Pattern(
        name="checkout", version=1, state_model=Order,
        nodes=(Node("review", review), Node("decided", decided), Node("charge", charge),
               Node("ship", ship)),
    ))
    return registry
