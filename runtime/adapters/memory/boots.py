"""The boot registry in process memory (issue 15, M11: several Vessels on one
database). The reference for `runtime.adapters.postgres.boots`: the same
results for the same calls, with the caller's `now` (its Clock) standing in
for the database's clock."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from runtime.adapters.memory.gate import enter


@dataclass(frozen=True)
class BootLease:
    boot_id: str
    started_at: datetime
    renewed_at: datetime
    lease_expires_at: datetime


class BootsMixin:
    boot_table: dict[str, BootLease]

    async def register_boot(self, boot_id: str, lease_s: float, now: datetime) -> None:
        await self.renew_boot(boot_id, lease_s, now)

    async def renew_boot(self, boot_id: str, lease_s: float, now: datetime) -> bool:
        if not lease_s >= 0:
            raise ValueError(
                f"a boot lease must be a non-negative number of seconds, not {lease_s!r}")
        await enter()
        old = self.boot_table.get(boot_id)
        expires = now + timedelta(seconds=lease_s)
        started = old.started_at if old is not None else now
        self.boot_table[boot_id] = BootLease(boot_id, started, now, expires)
        return old is not None and old.lease_expires_at > now

    async def boot_alive(self, boot_id: str, now: datetime) -> bool:
        # A pure read without the scheduler checkpoint other calls take: a world
        # whose boots never register (the simulator) interleaves exactly as it
        # did before the registry existed.
        lease = self.boot_table.get(boot_id)
        return lease is not None and lease.lease_expires_at > now
