"""Settling a claimed Run, fenced by its sequence: one decision for both ledgers.

Seed 000_81a5c720b14d934a.txt, "Admission and exact claim": terminal truth is
written under a compare-and-set on the claimed sequence. Each ledger reads or
locks the Run and its delivery `seq`, asks `decide`, and only then writes.
`Verdict.APPLY` writes the settlement (the Run, then its delivery SETTLED);
`Verdict.REPEATED` hands back the stored Run unchanged, so a settlement
repeated after an ambiguous commit reports the same truth; `Verdict.FENCED`
writes nothing and the call answers None.

`check_steps` is the rule for the Steps a settlement may carry (issue 17,
M14): at most one terminal Step, last, with the hop's lifecycle Steps that
the Step writer had not yet written before it; lifecycle Steps never ride
without the terminal one. Both ledgers write them all or none, at the Run's
next indexes, and none when the Run has a terminal Step already.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import Any

from runtime.adapters.open_run import OPEN_STATUSES
from runtime.events.model import TERMINAL_KINDS
from runtime.models import DeliveryState, Run, RunDelivery, Settlement

SETTLEABLE_STATUSES = OPEN_STATUSES
"""The claiming hop may settle from a live hardware wait too: it still holds the claim."""

StepItem = tuple[str, dict[str, Any]]


class Verdict(Enum):
    FENCED = "fenced"
    """Nothing is written; the call answers None."""
    REPEATED = "repeated"
    """The same settlement of this sequence is stored already; answer the stored Run."""
    APPLY = "apply"
    """Write the settlement."""


def decide(run: Run | None, d: RunDelivery | None, seq: int, settlement: Settlement) -> Verdict:
    """The verdict for settling `seq` with `settlement`, from the rows as locked."""
    if run is None or d is None or run.seq != seq:
        return Verdict.FENCED
    if d.state is DeliveryState.SETTLED and (run.status, run.result, run.error) == (
        settlement.status, settlement.result, settlement.error
    ):
        return Verdict.REPEATED
    if run.status not in SETTLEABLE_STATUSES or d.state is not DeliveryState.CLAIMED:
        return Verdict.FENCED
    return Verdict.APPLY


def check_steps(step: StepItem | None, before: Sequence[StepItem]) -> list[StepItem]:
    """The Steps a settlement writes, in order (`before`, then `step`); ValueError,
    before anything is written, for a non-terminal `step`, a terminal kind in
    `before`, or `before` without `step`."""
    if step is not None and step[0] not in TERMINAL_KINDS:
        raise ValueError(f"settle_run writes only a terminal Step, not {step[0]!r}")
    if before and step is None:
        raise ValueError("settle_run writes lifecycle Steps only ahead of its terminal Step")
    for kind, _ in before:
        if kind in TERMINAL_KINDS:
            raise ValueError(f"settle_run's terminal Step is its last one, not {kind!r}")
    return [] if step is None else [*before, step]
