"""The three ways a leased job's attempt ends, written once for both JobStores.

`schedule_retry`, `fail` and `exhaust` (seed 004_85033eb8fc772f12.txt, "Bounded
retries") differ only in the `runtime.jobs.rules` decision they apply. A store
that mixes in `AttemptEndings` supplies `_end_attempt`: its one transaction that
reads (or locks) the job, lets the decision end the fence's attempt with the next
event index and the interpretation the attempt's call served, and writes it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from datetime import datetime
from typing import Any
from uuid import UUID

from runtime.jobs import rules
from runtime.jobs.models import AttemptFailure, LeasedJob


class AttemptEndings(ABC):
    @abstractmethod
    async def _end_attempt(
        self, decide: Callable[..., rules.Decision], job_id: UUID, fence: int, owner: str,
        *args: Any,
    ) -> LeasedJob:
        """Apply `decide(job, fence, owner, *args, next_event, interpretation)` in one
        transaction and answer the job as it stands after it (or raise its error)."""

    async def schedule_retry(
        self,
        job_id: UUID,
        fence: int,
        owner: str,
        retry_at: datetime,
        failure: AttemptFailure,
        now: datetime,
    ) -> LeasedJob:
        return await self._end_attempt(rules.decide_retry, job_id, fence, owner, retry_at,
                                       failure, now)

    async def fail(
        self, job_id: UUID, fence: int, owner: str, failure: AttemptFailure, now: datetime
    ) -> LeasedJob:
        return await self._end_attempt(rules.decide_fail, job_id, fence, owner, failure, now)

    async def exhaust(
        self, job_id: UUID, fence: int, owner: str, failure: AttemptFailure, now: datetime
    ) -> LeasedJob:
        return await self._end_attempt(rules.decide_exhaust, job_id, fence, owner, failure, now)
