"""The boot registry on PostgreSQL (issue 15, M11: several Vessels on one
database, beyond seed 000_81a5c720b14d934a.txt's single-process topology).

Leases are measured by the database's clock (`clock_timestamp()`), never by a
Vessel's: Vessels on hosts whose clocks disagree still agree on which boot is
dead. The `now` argument of the seam is therefore not used here; the memory
ledger, which has no clock of its own, measures with it instead.
"""

from __future__ import annotations

from datetime import datetime

from runtime.adapters.postgres.tx import Transactional

RENEW_BOOT = (
    "INSERT INTO vessel_boot AS b (boot_id, started_at, renewed_at, lease_expires_at) "
    "VALUES (%(boot_id)s, clock_timestamp(), clock_timestamp(), "
    "clock_timestamp() + make_interval(secs => %(lease_s)s)) "
    "ON CONFLICT (boot_id) DO UPDATE SET renewed_at = clock_timestamp(), "
    "lease_expires_at = clock_timestamp() + make_interval(secs => %(lease_s)s)"
)
BOOT_ALIVE = (
    "SELECT lease_expires_at > clock_timestamp() AS live FROM vessel_boot "
    "WHERE boot_id = %(boot_id)s"
)
LOCK_BOOT = BOOT_ALIVE + " FOR UPDATE"


class BootsMixin(Transactional):
    async def register_boot(self, boot_id: str, lease_s: float, now: datetime) -> None:
        _check_lease(lease_s)
        async with self._transaction() as cur:
            await cur.execute(RENEW_BOOT, {"boot_id": boot_id, "lease_s": lease_s})

    async def renew_boot(self, boot_id: str, lease_s: float, now: datetime) -> bool:
        _check_lease(lease_s)
        async with self._transaction() as cur:
            await cur.execute(LOCK_BOOT, {"boot_id": boot_id})
            row = await cur.fetchone()
            await cur.execute(RENEW_BOOT, {"boot_id": boot_id, "lease_s": lease_s})
            return bool(row is not None and row["live"])

    async def boot_alive(self, boot_id: str, now: datetime) -> bool:
        async with self._transaction() as cur:
            await cur.execute(BOOT_ALIVE, {"boot_id": boot_id})
            row = await cur.fetchone()
            return bool(row is not None and row["live"])


def _check_lease(lease_s: float) -> None:
    if not lease_s >= 0:
        raise ValueError(f"a boot lease must be a non-negative number of seconds, not {lease_s!r}")
