"""The tables of the memory ledger and the two writes every transaction uses."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from runtime.adapters.memory.service_store import MemoryServiceStore
from runtime.models import AgentJob, CheckpointRecord, Consent, Run, RunDelivery, Step


class Tables:
    run_table: dict[UUID, Run]
    delivery_table: dict[tuple[UUID, int], RunDelivery]
    step_log: dict[UUID, list[Step]]
    consent_table: dict[UUID, Consent]
    agent_job_table: dict[UUID, AgentJob]
    checkpoint_table: dict[UUID, CheckpointRecord]
    late_fence_owed: set[UUID]
    services: MemoryServiceStore
    """The service attempts the owner CAS of AWAITING_SERVICE reads (same database)."""

    def _put_run(self, run: Run, **changes: Any) -> Run:
        new = run.model_copy(update=changes)
        self.run_table[run.id] = new
        return new

    def _put_delivery(self, d: RunDelivery, **changes: Any) -> RunDelivery:
        new = d.model_copy(update=changes)
        self.delivery_table[(d.run_id, d.seq)] = new
        return new
