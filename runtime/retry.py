"""Bounded retry of transient ledger errors.

Every Ledger method is written so that repeating it after an ambiguous
commit (applied, then an error) is safe: conditional writes return the
state they find, and claims and settlements recognise their own earlier
success. This module only decides how often and how long to retry.

The bound is time, not a count: a PostgreSQL restart or a failover takes
seconds, and a hop that gave up after a second and a half of retries turned
such a blip into a FAILED Run whose effect may already have happened
(issue M11; seed 000_81a5c720b14d934a.txt, "Cancellation, mutation, and
recovery": FAILED must not claim what was not proved). `retried(ledger)`
is the one wrapping that both the PostgreSQL profile and the simulator's
boots put around their ledger, so the simulator checks what ships.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio

from runtime.errors import LedgerUnavailable
from runtime.seams import Entropy

T = TypeVar("T")

RETRY_BUDGET_S = 30.0
"""How long one operation keeps retrying after its first transient error."""
BASE_DELAY_S = 0.05
MAX_DELAY_S = 2.0


async def retrying(
    entropy: Entropy, op: Callable[[], Awaitable[T]], budget_s: float | None = None
) -> T:
    """Run `op`, retrying LedgerUnavailable with jittered exponential backoff
    for up to `budget_s` (RETRY_BUDGET_S, read at call time) of the event
    loop's clock; the error of the last attempt is raised after that."""
    budget = RETRY_BUDGET_S if budget_s is None else budget_s
    started: float | None = None
    attempt = 0
    while True:
        try:
            return await op()
        except LedgerUnavailable:
            now = anyio.current_time()
            started = now if started is None else started
            delay = min(MAX_DELAY_S, BASE_DELAY_S * 2**attempt) * (0.5 + entropy.random())
            if now + delay - started > budget:
                raise
            attempt += 1
            await anyio.sleep(delay)


NOT_RETRIED = frozenset({"append_step", "append_steps"})
"""Step appends are durable best effort with their own latch and repair
(runtime.events): a blind repeat could write a Step twice."""


def retried(ledger: Any, entropy: Entropy) -> Any:
    """`ledger` with every transaction retried (never wrapped twice)."""
    return ledger if isinstance(ledger, RetryingLedger) else RetryingLedger(ledger, entropy)


def unretried(ledger: Any) -> Any:
    """The ledger inside `retried` (for a harness that hooks each real call)."""
    return ledger.inner if isinstance(ledger, RetryingLedger) else ledger


class RetryingLedger:
    """A Ledger whose every transaction is retried on transient errors.

    Safe because each Ledger method is idempotent under repetition after an
    ambiguous commit (see runtime.seams.Ledger); append_step is passed through.
    """

    def __init__(self, inner: Any, entropy: Entropy) -> None:
        self._inner = inner
        self._entropy = entropy

    @property
    def inner(self) -> Any:
        return self._inner

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name.startswith("_") or name in NOT_RETRIED or not callable(attr):
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            return await retrying(self._entropy, lambda: attr(*args, **kwargs))

        return call
