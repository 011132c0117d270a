"""The simulated provider's faults keep the proofs its profile declares (seed
000_81a5c720b14d934a.txt, "Service job attempts"; runtime/service/driver.py).

A driver declaring `lookup_proves_absence` is believed by reconciliation: an
empty lookup of a SUBMITTING attempt is proof of no effect, and with a cancel
requested it settles the attempt CANCELLED. A lookup that hid an existing job
from such a provider would manufacture a containment failure the runtime could
not see (cancel_children found one as `service_cancel_contained`), so the lie is
offered only to providers whose absence proves nothing.
"""

from __future__ import annotations

from typing import Any, cast

import pytest

from sim.provider import PROFILES, SimProvider


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_a_lookup_lies_only_where_absence_is_not_proof(profile: str) -> None:
    provider = SimProvider(world=cast(Any, None), profile=profile)
    assert provider.may_lie is not provider.lookup_proves_absence


def test_the_profiles_that_may_lie_still_include_a_replaying_one() -> None:
    # Lies keep meeting same-key replay re-submission (the "replay" profile).
    liars = {p for p in PROFILES if SimProvider(world=cast(Any, None), profile=p).may_lie}
    assert liars == {"replay", "none"}
