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
Nor does it judge while its own lease may be lapsing: once its last successful
renewal is a whole lease old (a renewal still retrying through an outage), it
is no more steady than the peers it would judge.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import anyio

from runtime.seams import Deps

log = logging.getLogger(__name__)

BOOT_LEASE_S = 15.0

Judge = bool | Callable[[], bool]
"""Whether this boot may judge other boots dead by their leases: a fixed answer, or
`BootLeaseKeeper.steady` asked again at the moment of each judgement."""


def may_judge(judge: Judge) -> bool:
    """Ask `judge` now. A recovery pass that waited out an outage must not act on a
    steadiness it saw before the wait (found by the simulator's two_vessels scenario:
    a relay judged a peer dead by a lease that had lapsed during that outage)."""
    return judge() if callable(judge) else judge


@dataclass
class BootLeaseKeeper:
    deps: Deps
    lease_s: float = BOOT_LEASE_S
    lapses: int = 0
    steady_since: datetime | None = None
    """Since when this boot's own lease has been live without a lapse."""
    renewed_at: datetime | None = None
    """When the last successful registration or renewal began (this boot's clock)."""

    @property
    def renew_every_s(self) -> float:
        return self.lease_s / 3

    def steady(self) -> bool:
        """True when this boot may judge other boots dead by their leases."""
        since, renewed = self.steady_since, self.renewed_at
        now, lease = self.deps.clock.now(), timedelta(seconds=self.lease_s)
        return since is not None and renewed is not None and now - since >= lease \
            and now - renewed < lease

    async def register(self) -> None:
        now = self.deps.clock.now()
        await self.deps.ledger.register_boot(self.deps.boot_id, self.lease_s, now)
        self.steady_since = self.renewed_at = now

    async def renew_once(self) -> bool:
        now = self.deps.clock.now()
        try:
            live = await self.deps.ledger.renew_boot(self.deps.boot_id, self.lease_s, now)
        except Exception:
            self.steady_since = None  # the lease may be lapsing: judge nobody meanwhile
            raise
        self.renewed_at = now
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
