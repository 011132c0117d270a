"""Invariants of one hop as the broker sees it: what the hop handler returns.

The broker's worker (SAQ stores it as the job's result) learns a hop's
outcome from what `Worker.perform_run` returns. `sim.mutation_checks`
watches every call of the handler and the ledger writes it made that
achieved something (a claim, a settlement, a park); when the call ends the
outcome is compared with them:

- `hop_ends_with_an_outcome`: a hop returns a HopOutcome, never raises,
  unless its process died (ProcessCrashed) or it was cancelled (an abort, a
  shutdown); storage errors outlasting the retry are raised by design only
  past RETRY_BUDGET_S, which no injected blip reaches.
- `hop_outcome_truthful`: SKIPPED exactly when the call committed no claim;
  SETTLED only after its settlement landed; PARKED only after its park
  landed; FENCED only when neither did.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runtime.errors import ProcessCrashed

if TYPE_CHECKING:
    from sim.checker import Checker
    from sim.mutation_checks import HopCall

PARKS = frozenset({"park_consent", "park_delegate", "park_service"})
"""A hardware wait keeps the hop (runtime.stasis.waits): it never parks one."""

INVARIANTS = (
    ("hop_ends_with_an_outcome", "a hop handler returns an outcome unless its process died or "
     "it was cancelled: no exception escapes a hop", "seed 000 'Admission and exact claim'"),
    ("hop_outcome_truthful", "the outcome a hop reports to the broker matches what it "
     "committed: skipped without a claim, settled after its settlement, parked after its "
     "park, fenced when neither landed", "seed 000 'Admission and exact claim'"),
)


class HopChecks:
    def __init__(self, checker: Checker) -> None:
        self.checker = checker

    def raised(self, call: HopCall, exc: Exception) -> None:
        if isinstance(exc, ProcessCrashed) or (isinstance(exc, ExceptionGroup) and all(
                isinstance(e, ProcessCrashed) for e in exc.exceptions)):
            return
        self.checker.fail("hop_ends_with_an_outcome", f"hop {call.key} of {call.boot_id} raised "
                          f"{type(exc).__name__}: {exc}"[:300])

    def returned(self, call: HopCall, outcome: object) -> None:
        value = getattr(outcome, "value", outcome)
        settled = "settle_run" in call.wrote
        parked = bool(PARKS.intersection(call.wrote))
        claimed = call.claimed
        expected_ok = {
            "skipped": not claimed,
            "settled": claimed and settled,
            "parked": claimed and parked and not settled,
            "fenced": claimed and not settled and not parked,
        }
        if value not in expected_ok:
            self.checker.fail("hop_outcome_truthful", f"hop {call.key} returned {outcome!r}")
        if not expected_ok[str(value)]:
            self.checker.fail("hop_outcome_truthful", f"hop {call.key} of {call.boot_id} "
                              f"returned {value} after claim={claimed}, "
                              f"writes={call.wrote}")
