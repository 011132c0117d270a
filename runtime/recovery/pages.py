"""Paging Runs by (updated_at, id): a Run that changes status after a cursor
passed it shows up again in a later page, so nothing is skipped for good."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import datetime
from uuid import UUID

from runtime.models import Run, RunStatus
from runtime.seams import Ledger

PAGE_SIZE = 50

Cursor = tuple[datetime, UUID] | None
PageRead = Callable[[Cursor, int], Awaitable[list[Run]]]


async def all_runs(
    ledger: Ledger, statuses: Sequence[RunStatus], page_size: int = PAGE_SIZE
) -> AsyncIterator[Run]:
    async def read(cursor: Cursor, limit: int) -> list[Run]:
        return await ledger.page_runs(statuses, cursor, limit)

    async for run in paged(read, page_size):
        yield run


async def paged(read: PageRead, page_size: int = PAGE_SIZE) -> AsyncIterator[Run]:
    """Every Run `read` lists, page by page after the last one seen."""
    cursor: Cursor = None
    while True:
        page = await read(cursor, page_size)
        for run in page:
            yield run
        if len(page) < page_size:
            return
        cursor = (page[-1].updated_at, page[-1].id)
