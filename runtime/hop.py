"""HopContext: what a Pattern's nodes may use during one hop of a Run."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from runtime import faults
from runtime.errors import ClaimLost
from runtime.models import AgentJob, Consent, Run, RunStatus
from runtime.retry import retrying
from runtime.seams import Deps
from runtime.service.models import ServiceJobAttempt


@dataclass
class Stasis:
    """What one hop knows about the Run's checkpoint: whether this hop tried to
    save one (even a save that may not have committed). Shared by every
    HopContext of the hop (`resumed_with` keeps it)."""

    saving: bool = False


class EventPublisher(Protocol):
    async def publish(self, kind: str, data: Mapping[str, Any] | None = None) -> object: ...


@dataclass(frozen=True)
class HopContext:
    deps: Deps
    run: Run
    seq: int
    consent: Consent | None = None
    """The decided consent this hop resumed from, read from the ledger."""
    agent_job: AgentJob | None = None
    """The terminal agent job this hop resumed from, read from the ledger."""
    service_attempt: ServiceJobAttempt | None = None
    """The terminal service attempt this hop resumed from, read from its store."""
    events: EventPublisher | None = None
    """The Run's event channel in this process (tokens are live-only)."""
    stasis: Stasis = field(default_factory=Stasis)
    """Set before this hop's first checkpoint write (issue 17: the worker skips the
    deletion round trip of a fresh hop that never wrote one)."""

    async def publish(self, kind: str, data: Mapping[str, Any] | None = None) -> None:
        if self.events is not None:
            await self.events.publish(kind, data)

    async def token(self, text: str) -> None:
        """A live-only token delta: shown to readers, never persisted."""
        await self.publish("token", {"text": text})

    def resumed_with(self, **waits: Any) -> HopContext:
        return dataclasses.replace(self, **waits)

    def effect_identity(self, name: str) -> str:
        """The idempotency identity of an external effect: stable across hops of a Run."""
        return f"{self.run.id}:{name}"

    async def effect(self, name: str, payload: dict[str, Any]) -> bool:
        """Apply an external effect through the sink, once per identity.

        Only while this hop still holds the Run's claim: a hop whose Run went
        CANCELLING (or was otherwise moved on) raises ClaimLost instead, so it
        creates no effect while cancellation waits for the parent's abort.
        """
        run = await retrying(self.deps.entropy, lambda: self.deps.ledger.get_run(self.run.id))
        if run is None or run.status is not RunStatus.RUNNING or run.seq != self.seq:
            status = run.status.value if run is not None else "missing"
            raise ClaimLost(self.run.id, self.seq, status)
        applied = await self.deps.effects.apply(
            self.effect_identity(name), self.run.id, self.seq, payload
        )
        await self.deps.faults.point(faults.EFFECT_APPLIED, run_id=self.run.id)
        return applied
