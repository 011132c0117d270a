"""Repair of missing terminal evidence (seed 000, "Events, settlement, and waits").

For a Run whose terminal truth committed but whose terminal Step did not
land (a crash between them, or a failed append), start a fresh writer
generation and append the terminal Step exactly once. Startup pages every
terminal Run through this; the relay repairs the debts its own hops left.
"""

from __future__ import annotations

import logging
from uuid import UUID

from runtime.events.hop import TERMINAL_KINDS
from runtime.events.writer import StepWriter
from runtime.models import Run
from runtime.seams import Deps

log = logging.getLogger(__name__)

TERMINAL_STEP_KINDS = frozenset(kind.value for kind in TERMINAL_KINDS.values())


async def repair_terminal_evidence(deps: Deps, run: Run) -> bool:
    """True when a missing terminal Step was written now."""
    if not run.status.terminal:
        return False
    steps = await deps.ledger.steps(run.id)
    if any(step.kind in TERMINAL_STEP_KINDS for step in steps):
        return False
    async with StepWriter(deps.ledger, deps.clock, run.id, run.seq) as writer:
        kind = TERMINAL_KINDS[run.status].value
        await writer.repair(kind, {"error": run.error, "repaired": True})
    return True


async def write_or_owe(deps: Deps, run: Run, debt: dict[UUID, int] | None) -> None:
    """Write a terminal Run's missing Step now; on failure owe it to the relay.

    Evidence is durable best effort: a failure never changes Run truth, and a
    debt recorded here is repaired by the relay (or by the next startup).
    """
    try:
        await repair_terminal_evidence(deps, run)
    except Exception as exc:
        log.warning("terminal Step of Run %s not written: %r", run.id, exc)
        if debt is not None:
            debt[run.id] = run.seq
