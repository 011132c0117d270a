"""Bounded retry of transient ledger errors.

Every Ledger method is written so that repeating it after an ambiguous
commit (applied, then an error) is safe: conditional writes return the
state they find, and claims and settlements recognise their own earlier
success. This module only decides how often and how long to retry.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

from runtime.errors import LedgerUnavailable
from runtime.seams import Entropy

T = TypeVar("T")

ATTEMPTS = 6
BASE_DELAY_S = 0.05
MAX_DELAY_S = 2.0


async def retrying(entropy: Entropy, op: Callable[[], Awaitable[T]], attempts: int = ATTEMPTS) -> T:
    """Run `op`, retrying LedgerUnavailable with jittered exponential backoff."""
    for attempt in range(attempts):
        try:
            return await op()
        except LedgerUnavailable:
            if attempt == attempts - 1:
                raise
            delay = min(MAX_DELAY_S, BASE_DELAY_S * 2**attempt)
            await anyio.sleep(delay * (0.5 + entropy.random()))
    raise AssertionError("unreachable")  # pragma: no cover
