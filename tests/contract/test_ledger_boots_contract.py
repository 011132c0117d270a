"""The boot registry of the Ledger (issue 15, M11: several Vessels on one
database), run against every implementation; the memory ledger is the
reference.

PostgreSQL measures leases by its own clock and the memory ledger by the
caller's `now`, so every case passes the current time and uses leases that
are either long (an hour: alive) or zero (expired at once).
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from runtime.seams import Ledger

pytestmark = pytest.mark.anyio

HOUR = 3600.0


def now() -> datetime:
    return datetime.now(UTC)


async def test_a_boot_that_never_registered_is_dead(ledger: Ledger) -> None:
    assert await ledger.boot_alive("boot-never", now()) is False


async def test_a_registered_boot_is_alive_until_its_lease_expires(ledger: Ledger) -> None:
    await ledger.register_boot("boot-a", HOUR, now())
    await ledger.register_boot("boot-b", 0.0, now())
    assert await ledger.boot_alive("boot-a", now()) is True
    assert await ledger.boot_alive("boot-b", now()) is False  # its lease ran out at once
    assert await ledger.boot_alive("boot-c", now()) is False


async def test_registering_again_renews_the_same_boot(ledger: Ledger) -> None:
    await ledger.register_boot("boot-a", 0.0, now())
    await ledger.register_boot("boot-a", HOUR, now())
    assert await ledger.boot_alive("boot-a", now()) is True


async def test_renewal_reports_whether_the_lease_was_still_live(ledger: Ledger) -> None:
    await ledger.register_boot("boot-a", HOUR, now())
    assert await ledger.renew_boot("boot-a", HOUR, now()) is True
    assert await ledger.renew_boot("boot-a", 0.0, now()) is True  # live until this renewal
    assert await ledger.boot_alive("boot-a", now()) is False
    assert await ledger.renew_boot("boot-a", HOUR, now()) is False  # it had lapsed
    assert await ledger.boot_alive("boot-a", now()) is True  # and is live again


async def test_renewing_an_unregistered_boot_registers_it(ledger: Ledger) -> None:
    assert await ledger.renew_boot("boot-new", HOUR, now()) is False
    assert await ledger.boot_alive("boot-new", now()) is True


async def test_a_negative_lease_is_refused(ledger: Ledger) -> None:
    with pytest.raises(ValueError, match="non-negative"):
        await ledger.register_boot("boot-a", -1.0, now())
    with pytest.raises(ValueError, match="non-negative"):
        await ledger.renew_boot("boot-a", float("nan"), now())
    assert await ledger.boot_alive("boot-a", now()) is False

