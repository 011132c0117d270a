"""GraphRunner: one hop of a Pattern's graph, fresh or resumed from its checkpoint.

A fresh hop starts at the Pattern's first node with the Intent's content as
state. A resumed hop reads the Run's checkpoint and continues from its first
pending snapshot; the wait that resumed it (a decided consent, a terminal
agent job) is read from the ledger, never from the enqueue payload. Failure
rules (seed 003, "Return makes a new claim"): a missing checkpoint fails as
`stasis lost`, an invalid document fails with the validator's text, a
Pattern or schema mismatch fails as `pinned Pattern unavailable`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from runtime.graph.snapshots import SCHEMA, Checkpoint, EndSnapshot, NodeSnapshot, SnapshotStatus
from runtime.graph.transitions import (
    AwaitConsent,
    AwaitService,
    End,
    Goto,
    NeedHardware,
    Transition,
)
from runtime.hop import HopContext
from runtime.models import ResumeMode, RunDelivery, RunStatus, Settlement
from runtime.registry import Pattern
from runtime.stasis.waits import Parked, Waits

STASIS_LOST = "stasis lost"
PINNED_PATTERN_UNAVAILABLE = "pinned Pattern unavailable"

HopResult = Settlement | Parked


def _failed(reason: str) -> Settlement:
    return Settlement(status=RunStatus.FAILED, error=reason)


@dataclass
class GraphRunner:
    ctx: HopContext
    pattern: Pattern

    async def run(self, delivery: RunDelivery) -> HopResult:
        if delivery.mode is ResumeMode.FRESH:
            checkpoint = Checkpoint(
                run_id=self.ctx.run.id,
                pattern=self.pattern.name,
                pattern_version=self.pattern.version,
            )
            state = self.pattern.initial_state(self.ctx.run.intent.content)
            return await self._walk(checkpoint, self.pattern.start, state)
        loaded = await self._resume_point()
        if isinstance(loaded, Settlement):
            return loaded
        checkpoint, snap, state = loaded
        snap.status = SnapshotStatus.RUNNING
        return await self._walk(checkpoint, snap.node, state, resumed=snap)

    async def _resume_point(self) -> Settlement | tuple[Checkpoint, NodeSnapshot, Any]:
        record = await self.ctx.deps.ledger.load_checkpoint(self.ctx.run.id)
        if record is None:
            return _failed(STASIS_LOST)
        try:
            checkpoint = Checkpoint.model_validate(record.document)
        except ValidationError as exc:
            return _failed(f"invalid checkpoint: {exc}")
        if (
            checkpoint.schema_id != SCHEMA
            or checkpoint.pattern != self.pattern.name
            or checkpoint.pattern_version != self.pattern.version
        ):
            return _failed(PINNED_PATTERN_UNAVAILABLE)
        snap = checkpoint.first_resumable()
        if snap is None or snap.run_id != self.ctx.run.id:
            return _failed(STASIS_LOST)
        try:
            state = self.pattern.decode(snap.state)
        except ValidationError as exc:
            return _failed(f"invalid checkpoint state: {exc}")
        return checkpoint, snap, state

    async def _walk(
        self, checkpoint: Checkpoint, node: str, state: Any, resumed: NodeSnapshot | None = None
    ) -> HopResult:
        waits = Waits(self.ctx, self.pattern, checkpoint)
        ctx = await waits.context_for(resumed) if resumed else self.ctx
        while True:
            await ctx.publish("node.started", {"node": node})
            outcome = await self.pattern.node(node).run(ctx, state)
            await ctx.publish("node.completed", {"node": node})
            state, transition = self._split(node, outcome)
            if resumed is not None:
                resumed.status = SnapshotStatus.SUCCESS
                resumed = None
            if isinstance(transition, Goto):
                node = transition.node
                continue
            if isinstance(transition, End):
                checkpoint.history.append(
                    EndSnapshot(state=self.pattern.encode(state), result=transition.result)
                )
                return Settlement(status=RunStatus.DONE, result=transition.result)
            if isinstance(transition, NeedHardware):
                waited = await waits.hardware(state, transition)
                if isinstance(waited, Settlement | Parked):
                    return waited
                state, node = waited, transition.then
                ctx = self.ctx
                continue
            if isinstance(transition, AwaitConsent):
                return await waits.consent(state, transition)
            if isinstance(transition, AwaitService):
                return await waits.service(state, transition)
            return await waits.delegate(state, transition)

    def _split(self, node: str, outcome: Any) -> tuple[Any, Transition]:
        if isinstance(outcome, tuple):
            state, transition = outcome
            return state, transition
        following = self.pattern.after(node)
        if following is None:
            return outcome, End(result=self.pattern.encode(outcome))
        return outcome, Goto(following)
