"""The relays' page scheduler (seed 000, "Cancellation, mutation, and recovery").

Each relay pass reads a bounded amount: one revisit page and one forward
page. A page where any Run was degraded, caller-held or still waiting is
kept for revisiting (each distinct page once), and revisits alternate with
forward progress, so old poison pages never drop out of repair and never
starve newer Runs of attention. The forward cursor wraps around at the end.
Pages are ordered by (updated_at, id).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from uuid import UUID

from runtime.models import Run

Cursor = tuple[datetime, UUID] | None
PageReader = Callable[[Cursor, int], Awaitable[list[Run]]]
Visit = Callable[[Run], Awaitable[bool]]
"""Recover one Run; True when it needs no further attention. It must not raise: the
caller isolates each Run (Relays._step's `guarded` answers False for any Exception),
so one Run's failure neither ends the page nor skips the Runs after it."""


@dataclass
class PageScheduler:
    page_size: int = 50
    forward: Cursor = None
    revisits: deque[Cursor] = field(default_factory=deque)
    _held: set[Cursor] = field(default_factory=set)

    async def step(self, read: PageReader, visit: Visit) -> int:
        """One revisit page (if any) and one forward page; returns Runs visited."""
        seen = 0
        if self.revisits:
            start = self.revisits.popleft()
            self._held.discard(start)
            seen += await self._page(start, read, visit)
        start = self.forward
        page_seen, last = await self._read_page(start, read, visit)
        seen += page_seen
        self.forward = last if page_seen == self.page_size else None
        return seen

    async def _page(self, start: Cursor, read: PageReader, visit: Visit) -> int:
        seen, _ = await self._read_page(start, read, visit)
        return seen

    async def _read_page(self, start: Cursor, read: PageReader, visit: Visit) -> tuple[int, Cursor]:
        page = await read(start, self.page_size)
        unfinished = False
        for run in page:
            done = await visit(run)
            unfinished = unfinished or not done
        if unfinished and start not in self._held:
            self._held.add(start)
            self.revisits.append(start)
        last = (page[-1].updated_at, page[-1].id) if page else start
        return len(page), last
