"""The checkpoint document: one per Run, a history of node and end snapshots.

It holds declared workflow state only: never grants, secrets, handles,
streams, events or AgentJob truth (seed 003, "What crosses the threshold").
The first snapshot still `pending` is the one a resumed hop continues from;
it names the exact consent or agent job the Run waits on.
"""

from __future__ import annotations

import enum
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

SCHEMA = "vessel.checkpoint/1"


class SnapshotStatus(enum.StrEnum):
    CREATED = "created"
    PENDING = "pending"
    RUNNING = "running"
    SUCCESS = "success"
    ERROR = "error"


class NodeSnapshot(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["node"] = "node"
    node: str
    state: dict[str, Any]
    status: SnapshotStatus = SnapshotStatus.CREATED
    run_id: UUID
    consent_id: UUID | None = None
    agent_job_id: UUID | None = None
    service_attempt_id: UUID | None = None


class EndSnapshot(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["end"] = "end"
    state: dict[str, Any]
    result: dict[str, Any]


Snapshot = Annotated[NodeSnapshot | EndSnapshot, Field(discriminator="kind")]


class Checkpoint(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_id: str = Field(default=SCHEMA, alias="schema")
    run_id: UUID
    pattern: str
    pattern_version: int
    history: list[Snapshot] = Field(default_factory=list)

    def first_resumable(self) -> NodeSnapshot | None:
        for snap in self.history:
            if isinstance(snap, NodeSnapshot) and snap.status is SnapshotStatus.PENDING:
                return snap
        return None

    def consent_rounds(self) -> int:
        return sum(1 for s in self.history if isinstance(s, NodeSnapshot) and s.consent_id)

    def document(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)
