"""PooledStore: how the PostgreSQL side stores (leased jobs, service attempts) connect.

`connect` probes the server within `timeout_s` (ConnectFailed otherwise, with
nothing left open), checks with `check_schema` that the database is at this
code's newest migration, then opens a small pool. Like every
`Transactional`, the store is an async context manager that closes its pool.
"""

from __future__ import annotations

from typing import Self

from runtime.adapters.postgres.connect import DEFAULT_CONNECT_TIMEOUT_S, open_pool, probe
from runtime.adapters.postgres.migrate import require_current
from runtime.adapters.postgres.tx import Transactional


class PooledStore(Transactional):
    @classmethod
    async def connect(
        cls,
        dsn: str,
        *,
        min_size: int = 1,
        max_size: int = 4,
        timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        check_schema: bool = True,
    ) -> Self:
        conn = await probe(dsn, timeout_s)
        async with conn:
            if check_schema:
                await require_current(conn)
        pool = await open_pool(dsn, min_size=min_size, max_size=max_size, timeout_s=timeout_s)
        return cls(pool)
