"""An external system that honours idempotency identities, kept in memory."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from pydantic import BaseModel, ConfigDict

from runtime.adapters.memory.gate import enter


class EffectCall(BaseModel):
    """One call received by the sink, applied or deduplicated."""

    model_config = ConfigDict(frozen=True)

    identity: str
    run_id: UUID
    seq: int
    applied: bool


@dataclass
class MemoryEffectSink:
    calls: list[EffectCall] = field(default_factory=list)
    _applied: dict[str, dict[str, Any]] = field(default_factory=dict)

    async def apply(self, identity: str, run_id: UUID, seq: int, payload: dict[str, Any]) -> bool:
        await enter()
        applied = identity not in self._applied
        if applied:
            self._applied[identity] = dict(payload)
        self.calls.append(EffectCall(identity=identity, run_id=run_id, seq=seq, applied=applied))
        return applied

    def applied(self) -> dict[str, dict[str, Any]]:
        return dict(self._applied)
