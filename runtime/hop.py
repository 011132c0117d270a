"""HopContext: what a Pattern's nodes may use during one hop of a Run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runtime import faults
from runtime.models import Run
from runtime.seams import Deps


@dataclass(frozen=True)
class HopContext:
    deps: Deps
    run: Run
    seq: int

    def effect_identity(self, name: str) -> str:
        """The idempotency identity of an external effect: stable across hops of a Run."""
        return f"{self.run.id}:{name}"

    async def effect(self, name: str, payload: dict[str, Any]) -> bool:
        """Apply an external effect through the sink, once per identity."""
        applied = await self.deps.effects.apply(
            self.effect_identity(name), self.run.id, self.seq, payload
        )
        await self.deps.faults.point(faults.EFFECT_APPLIED, run_id=self.run.id)
        return applied
