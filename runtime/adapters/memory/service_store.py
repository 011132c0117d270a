"""MemoryServiceStore: the reference ServiceAttemptStore (seed
000_81a5c720b14d934a.txt, "Service job attempts").

Each method passes the `enter()` gate once, then decides with
`runtime.service.rules` and writes without awaiting: one atomic transaction
under anyio. Test/local process state only.
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from runtime.adapters.memory.gate import enter
from runtime.service import rules
from runtime.service.errors import UnknownAttempt
from runtime.service.models import Evidence, ServiceJobAttempt, ServiceOutcome


def _fresh(attempt: ServiceJobAttempt) -> ServiceJobAttempt:
    """A read hands back a copy, ids included, as the PostgreSQL store decodes a fresh
    row each time: a caller that compares ids by identity (`is`) instead of value is
    wrong there, and must be wrong here too (issue M9: `terminal_owner`'s owner test
    made `is not` passed every simulated seed while the same object came back)."""
    owner = attempt.owner
    run_id = None if owner.run_id is None else UUID(int=owner.run_id.int)
    # Fresh ids only, not a deep copy: records are frozen, and a deep copy of every
    # read made the relays' attempt reads quadratic (cancel_children swarm seed 40).
    return attempt.model_copy(update={"id": UUID(int=attempt.id.int),
                                      "owner": owner.model_copy(update={"run_id": run_id})})


class MemoryServiceStore:
    def __init__(self) -> None:
        self.attempt_table: dict[UUID, ServiceJobAttempt] = {}
        self.key_index: dict[str, UUID] = {}

    def _attempt(self, attempt_id: UUID) -> ServiceJobAttempt:
        attempt = self.attempt_table.get(attempt_id)
        if attempt is None:
            raise UnknownAttempt(attempt_id)
        return attempt

    def _put(self, attempt: ServiceJobAttempt) -> ServiceJobAttempt:
        self.attempt_table[attempt.id] = attempt
        return attempt

    async def prepare(self, attempt: ServiceJobAttempt) -> ServiceJobAttempt:
        await enter()
        by_key_id = self.key_index.get(attempt.idempotency_key)
        stored = rules.decide_prepare(
            attempt,
            self.attempt_table.get(attempt.id),
            None if by_key_id is None else self.attempt_table[by_key_id],
        )
        if stored is not None:
            return stored
        self.key_index[attempt.idempotency_key] = attempt.id
        return self._put(attempt)

    async def get(self, attempt_id: UUID) -> ServiceJobAttempt | None:
        await enter()
        attempt = self.attempt_table.get(attempt_id)
        return None if attempt is None else _fresh(attempt)

    async def by_key(self, idempotency_key: str) -> ServiceJobAttempt | None:
        await enter()
        attempt_id = self.key_index.get(idempotency_key)
        return None if attempt_id is None else _fresh(self.attempt_table[attempt_id])

    async def owned_by(self, run_id: UUID) -> list[ServiceJobAttempt]:
        await enter()
        mine = [a for a in self.attempt_table.values() if a.owner.run_id == run_id]
        return [_fresh(a) for a in sorted(mine, key=lambda a: (a.created_at, a.id))]

    async def begin_submit(self, attempt_id: UUID, now: datetime) -> ServiceJobAttempt:
        await enter()
        return self._put(rules.decide_begin_submit(self._attempt(attempt_id), now))

    async def begin_resubmit(
        self, attempt_id: UUID, proof: Evidence, now: datetime
    ) -> ServiceJobAttempt:
        await enter()
        return self._put(rules.decide_begin_resubmit(self._attempt(attempt_id), proof, now))

    async def accept(
        self, attempt_id: UUID, provider_job_id: str, evidence: Evidence, now: datetime
    ) -> ServiceJobAttempt:
        await enter()
        return self._put(
            rules.decide_accept(self._attempt(attempt_id), provider_job_id, evidence, now)
        )

    async def mark_running(
        self, attempt_id: UUID, progress_cursor: str | None, now: datetime
    ) -> ServiceJobAttempt:
        await enter()
        return self._put(rules.decide_running(self._attempt(attempt_id), progress_cursor, now))

    async def mark_indeterminate(
        self, attempt_id: UUID, evidence: Evidence, now: datetime
    ) -> ServiceJobAttempt:
        await enter()
        return self._put(rules.decide_indeterminate(self._attempt(attempt_id), evidence, now))

    async def settle(
        self, attempt_id: UUID, outcome: ServiceOutcome, evidence: Evidence, now: datetime
    ) -> ServiceJobAttempt:
        await enter()
        return self._put(rules.decide_settle(self._attempt(attempt_id), outcome, evidence, now))

    async def request_cancel(self, attempt_id: UUID, now: datetime) -> ServiceJobAttempt:
        await enter()
        return self._put(rules.decide_request_cancel(self._attempt(attempt_id), now))

    async def add_evidence(
        self, attempt_id: UUID, evidence: Evidence, now: datetime
    ) -> ServiceJobAttempt:
        await enter()
        return self._put(rules.decide_add_evidence(self._attempt(attempt_id), evidence, now))

    async def open_attempts(
        self, after: tuple[datetime, UUID] | None, limit: int
    ) -> list[ServiceJobAttempt]:
        if limit < 0:
            raise ValueError("limit must not be negative")
        await enter()
        live = sorted(
            (a for a in self.attempt_table.values() if not a.state.terminal),
            key=lambda a: (a.created_at, a.id),
        )
        if after is not None:
            live = [a for a in live if (a.created_at, a.id) > after]
        return live[:limit]
