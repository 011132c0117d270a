"""This boot's lease in the boot registry (issue 15, M11: several Vessels on
one database, beyond seed 000_81a5c720b14d934a.txt's single-process topology).

The lifespan registers the boot before startup reconciliation (so no claim of
this boot ever exists unregistered) and then renews the lease every third of
its length. Other boots fence and reconcile this boot's work only once the
lease has expired; a renewal that finds the lease already lapsed is logged,
since other boots may have failed this boot's hops meanwhile (the claim and
settlement fences keep that safe).

A boot judges another boot dead by its expired lease only while it is
`steady`: its own lease has been renewed without a lapse for at least one
whole lease. After a database outage every lease may have run out at once;
the peers then get a whole lease to renew before anyone fences their work.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

import anyio

from runtime.seams import Deps

log = logging.getLogger(__name__)

BOOT_LEASE_S = 15.0


@dataclass
class BootLeaseKeeper:
    deps: Deps
    lease_s: float = BOOT_LEASE_S
    lapses: int = 0
    steady_since: datetime | None = None
    """Since when this boot's own lease has been live without a lapse."""

    @property
    def renew_every_s(self) -> float:
        return self.lease_s / 3

    def steady(self) -> bool:
        """True when this boot may judge other boots dead by their leases."""
        since = self.steady_since
        return since is not None and self.deps.clock.now() - since >= timedelta(
            seconds=self.lease_s)

    async def register(self) -> None:
        now = self.deps.clock.now()
        await self.deps.ledger.register_boot(self.deps.boot_id, self.lease_s, now)
        self.steady_since = now

    async def renew_once(self) -> bool:
        now = self.deps.clock.now()
        try:
            live = await self.deps.ledger.renew_boot(self.deps.boot_id, self.lease_s, now)
        except Exception:
            self.steady_since = None  # the lease may be lapsing: judge nobody meanwhile
            raise
        if not live or self.steady_since is None:
            self.steady_since = now
        if not live:
            self.lapses += 1
            log.error("boot %s: its lease had expired before this renewal; other Vessels "
                      "may have recovered its work", self.deps.boot_id)
        return live

    async def run_forever(self) -> None:
        while True:
            await anyio.sleep(self.renew_every_s)
            try:
                await self.renew_once()
            except Exception as exc:  # the next renewal retries; the lease may lapse
                log.warning("boot %s: lease not renewed: %r", self.deps.boot_id, exc)
