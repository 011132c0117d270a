"""Repair of missing terminal evidence (seed 000, "Events, settlement, and waits").

For a Run whose terminal truth committed but whose terminal Step did not
land (a crash between them, or a failed append), start a fresh writer
generation and append the terminal Step exactly once. Startup pages the
ledger's evidence debts (`Ledger.evidence_debts`: terminal Runs without a
terminal Step) through this; the relay repairs the debts its own hops left.
"""

from __future__ import annotations

import logging
from uuid import UUID

from runtime.events.hop import TERMINAL_KINDS
from runtime.events.writer import StepWriter
from runtime.models import Run
from runtime.seams import Deps
from runtime.sessions import KeyedLocks

log = logging.getLogger(__name__)

TERMINAL_STEP_KINDS = frozenset(kind.value for kind in TERMINAL_KINDS.values())


_REPAIRS = KeyedLocks()
"""One terminal-evidence repair at a time per Run in this process: the canceller
(first cancel or a re-read), the relay's debts and startup may all reach the
same Run, and each reads the durable Steps before it appends."""


async def repair_terminal_evidence(deps: Deps, run: Run) -> bool:
    """True when a missing terminal Step was written now.

    Exactly once whoever calls it: in this process the read of the durable
    Steps and the append are one single-flight section per Run; across
    processes (two boots failing the same orphan, issue 15 M11) the ledger
    refuses a second terminal Step in the append's own transaction and hands
    back the first, which counts as already written: a no-op, not an error."""
    if not run.status.terminal:
        return False
    async with _REPAIRS.hold(f"{deps.boot_id}:{run.id}"):
        steps = await deps.ledger.steps(run.id)
        if any(step.kind in TERMINAL_STEP_KINDS for step in steps):
            return False
        async with StepWriter(deps.ledger, deps.clock, run.id, run.seq) as writer:
            kind = TERMINAL_KINDS[run.status].value
            step = await writer.repair(kind, {"error": run.error, "repaired": True})
    return step.index >= len(steps)  # an earlier index: another writer's Step stood


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
