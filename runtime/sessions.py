"""Process-local admission coordination: single-flight per key, session fence.

Within one process, same-key admissions are serialised so that retention and
publication happen once, and each Bridge session admits at most one
nonterminal Run (seed 000_81a5c720b14d934a.txt, "Admission and exact claim").
This is a one-process fast path, not the authority: the ledger's admission
transaction refuses a second nonterminal Run of a session and a second Run of
one id whichever process asks (issue 15, M11: several Vessels on one
database), and terminal Run truth frees a session by itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio


class KeyedLocks:
    """One FIFO lock per key, dropped when nobody holds or waits on it."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[anyio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(key, (anyio.Lock(), 0))
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)


class AdmissionCoordinator:
    """Serialises admission decisions per idempotency key and per session."""

    SESSION_LOOKUP_LIMIT = 16

    def __init__(self) -> None:
        self.keys = KeyedLocks()
        self.sessions = KeyedLocks()

    @asynccontextmanager
    async def admitting(self, key: str | None, session: str | None) -> AsyncIterator[None]:
        async with self._maybe(self.keys, key), self._maybe(self.sessions, session):
            yield

    @staticmethod
    @asynccontextmanager
    async def _maybe(locks: KeyedLocks, key: str | None) -> AsyncIterator[None]:
        if key is None:
            yield
        else:
            async with locks.hold(key):
                yield
