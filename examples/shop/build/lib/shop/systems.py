"""The shop's external systems: a card payment provider and a warehouse.

Both outlive the Vessel process that calls them (a crash of the shop does not
undo a charge), answer after a latency, and sometimes lose their answer while
the simulator's faults are on (Env.chance): the caller cannot tell whether a
timed-out charge happened. The provider honours idempotency keys as real card
providers do: a repeated key returns the first charge instead of a new one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import anyio

from harness.api import Env


class ProviderTimeout(Exception):
    """The request may or may not have been applied: its answer never came."""


@dataclass(frozen=True)
class Charge:
    id: str
    order: str
    amount_cents: int
    idempotency_key: str | None


@dataclass
class PaymentProvider:
    env: Env
    lost_answer: float = 0.2
    """Chance that a charge's answer is lost (while faults are on)."""
    charges: list[Charge] = field(default_factory=list)
    _by_key: dict[str, Charge] = field(default_factory=dict)

    async def charge(self, order: str, amount_cents: int, idempotency_key: str | None) -> str:
        """Charge a card; with a key seen before, the earlier charge is returned."""
        await anyio.sleep(round(self.env.rng.uniform(0.05, 0.8), 3))
        known = self._by_key.get(idempotency_key) if idempotency_key else None
        if known is None:
            known = Charge(f"ch_{len(self.charges) + 1}", order, amount_cents, idempotency_key)
            self.charges.append(known)
            if idempotency_key:
                self._by_key[idempotency_key] = known
        lost = self.env.chance(self.lost_answer)
        await anyio.sleep(round(self.env.rng.uniform(0.05, 0.8), 3))
        if lost:
            raise ProviderTimeout(f"no answer for the charge of {order}")
        return known.id

    def charges_of(self, order: str) -> list[Charge]:
        return [c for c in self.charges if c.order == order]


@dataclass
class Warehouse:
    env: Env
    shipments: dict[str, str] = field(default_factory=dict)
    """order -> the charge it was shipped against (one shipment per order)."""

    async def ship(self, order: str, charge_id: str) -> str:
        await anyio.sleep(round(self.env.rng.uniform(0.5, 5.0), 3))  # a slow service
        self.shipments.setdefault(order, charge_id)
        return f"ship-{order}"


def payments(env: Env) -> PaymentProvider:
    return PaymentProvider(env)


def warehouse(env: Env) -> Warehouse:
    return Warehouse(env)
