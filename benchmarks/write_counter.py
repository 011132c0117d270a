"""Which ledger methods hand out a transaction id, per unit of work (issue 17).

A debug counter for `pg_throughput.py --count-writes`: while installed it
wraps `Transactional._transaction`, and just before each transaction commits
it asks PostgreSQL `pg_current_xact_id_if_assigned()`. A transaction that
wrote or locked a row has an id (a write transaction, one `txid` of the
benchmark's figures); a read-only one has none. Counts are kept per ledger
method (the caller of `_transaction`), so the breakdown names where an
`echo` Run's write transactions go and which calls commit nothing.

The extra statement per transaction costs a round trip: throughput and CPU
figures of a counted phase are not comparable with uncounted ones.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

from runtime.adapters.postgres import tx

ASSIGNED = "SELECT pg_current_xact_id_if_assigned() IS NOT NULL AS assigned"


@dataclass
class WriteCounts:
    calls: Counter[str] = field(default_factory=Counter)
    writes: Counter[str] = field(default_factory=Counter)

    def per_unit(self, units: int) -> dict[str, dict[str, float]]:
        """Per method: transactions and write transactions per unit of work."""
        return {name: {"calls": round(n / units, 3),
                       "writes": round(self.writes[name] / units, 3)}
                for name, n in sorted(self.calls.items())}


@contextmanager
def counting() -> Iterator[WriteCounts]:
    """Count every ledger transaction opened meanwhile, by the method that opened it."""
    counts = WriteCounts()
    original = tx.Transactional._transaction

    @asynccontextmanager
    async def counted(self: Any, *, snapshot: bool = False) -> AsyncIterator[Any]:
        name = sys._getframe(2).f_code.co_name  # the ledger method in its `async with`
        async with original(self, snapshot=snapshot) as cur:
            yield cur
            await cur.execute(ASSIGNED)
            row = await cur.fetchone()
            counts.calls[name] += 1
            if row is not None and row["assigned"]:
                counts.writes[name] += 1

    single = tx.Transactional._statement

    @asynccontextmanager
    async def counted_single(self: Any) -> AsyncIterator[Any]:
        """An autocommit method's statements, counted as the one transaction they are
        when the method sends one (the counter wraps them in a transaction to ask)."""
        name = sys._getframe(2).f_code.co_name
        async with single(self) as cur, cur.connection.transaction():
            yield cur
            await cur.execute(ASSIGNED)
            row = await cur.fetchone()
            counts.calls[name] += 1
            if row is not None and row["assigned"]:
                counts.writes[name] += 1

    tx.Transactional._transaction = counted  # type: ignore[method-assign]
    tx.Transactional._statement = counted_single  # type: ignore[method-assign]
    try:
        yield counts
    finally:
        tx.Transactional._transaction = original  # type: ignore[method-assign]
        tx.Transactional._statement = single  # type: ignore[method-assign]
