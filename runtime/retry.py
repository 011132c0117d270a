"""Bounded retry of transient ledger errors.

Every Ledger method is written so that repeating it after an ambiguous
commit (applied, then an error) is safe: conditional writes return the
state they find, and claims and settlements recognise their own earlier
success. This module only decides how often and how long to retry.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

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


NOT_RETRIED = frozenset({"append_step"})
"""Step appends are durable best effort with their own latch and repair
(runtime.events): a blind repeat could write a Step twice."""


class RetryingLedger:
    """A Ledger whose every transaction is retried on transient errors.

    Safe because each Ledger method is idempotent under repetition after an
    ambiguous commit (see runtime.seams.Ledger); append_step is passed through.
    """

    def __init__(self, inner: Any, entropy: Entropy) -> None:
        self._inner = inner
        self._entropy = entropy

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name.startswith("_") or name in NOT_RETRIED or not callable(attr):
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            return await retrying(self._entropy, lambda: attr(*args, **kwargs))

        return call
