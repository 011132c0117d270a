"""Invariants on why a Run failed: every FAILED Run names a cause the world produced.

Mutation testing (`make mutation`, issue M9) showed runtime changes that turn
good Runs into FAILED ones, with no other invariant noticing: a failure is a
legal terminal state, so a worker that fails every hop as "pinned Pattern
unavailable", or a node whose TypeError the hop catches and settles as the
Run's failure, passed every campaign. These checks read only durable records
(the ledger's Run, its claimed delivery) and the world's own books (its
registry, its boots), like the rest of the checker.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from runtime.adapters.memory.broker import SWEPT
from runtime.models import Run, RunStatus
from runtime.recovery.orphans import ABANDONED, LOST
from runtime.seams import JobStatus
from runtime.worker import PINNED_PATTERN_UNAVAILABLE

if TYPE_CHECKING:
    from sim.checker import Checker

PROGRAMMING_ERRORS = (
    "AttributeError", "TypeError", "NameError", "UnboundLocalError", "KeyError", "IndexError",
    "AssertionError", "ZeroDivisionError", "RecursionError", "NotImplementedError",
)
"""Exceptions no simulated actor or fault raises: in a Run's error they are a runtime bug."""

_PROGRAMMING = re.compile(r"\b(" + "|".join(PROGRAMMING_ERRORS) + r")\b[:(]")

LOSABLE = (RunStatus.RUNNING, RunStatus.AWAITING_HARDWARE)
"""What startup may fail as lost (seed 000 'Cancellation, mutation, and recovery')."""

EFFECTS_OF_PATTERN = {"two_step": ("deliver",), "effectful": ("effect",)}
"""The effect names each effectful Pattern of runtime/patterns applies before it ends."""

OUTCOME_INVARIANTS = (
    ("failure_has_cause", "a Run fails only for a cause the world produced: never for a "
     "programming error in the runtime, never as a lost claim (the settling hop holds it), "
     "and never as 'pinned Pattern unavailable' while the registry holds its pinned Pattern",
     "seed 000 'Admission and exact claim'"),
    ("done_after_effect", "a Run of a Pattern that performs an external effect is DONE only "
     "once that effect's identity was applied", "DESIGN section 6"),
    ("lost_only_after_death", "a Run is failed as lost only from RUNNING or AWAITING_HARDWARE, "
     "and only when the boot that held its claim is no longer the live boot",
     "seed 000 'Cancellation, mutation, and recovery'"),
    ("abandoned_only_after_sweep", "a Run is failed as abandoned in the live boot only "
     "from RUNNING or AWAITING_HARDWARE under that boot's claim, once a sweep aborted its "
     "exact hop job (or the job is gone); never after a fence or abort by the live boot, "
     "never for a hop that failed out of its job",
     "seed 000 'Admission and exact claim' (heartbeat and sweep), "
     "'Cancellation, mutation, and recovery'"),
)


class OutcomeChecks:
    """Called by the Checker on each Run transition into FAILED or DONE."""

    def __init__(self, checker: Checker) -> None:
        self.checker = checker

    def run_failed(self, prev: Run, run: Run) -> None:
        error = run.error or ""
        world = self.checker.world
        found = _PROGRAMMING.search(error)
        if found:
            self.checker.fail("failure_has_cause", f"Run {run.id} failed on a runtime "
                              f"{found.group(1)}: {error[:160]}", run=str(run.id))
        # Settlement is fenced by the claim, so the hop that fails a Run holds it:
        # a settled failure that says the claim was lost contradicts itself.
        if error.startswith("ClaimLost"):
            self.checker.fail("failure_has_cause", f"Run {run.id} was settled FAILED by a hop "
                              f"that says it lost its claim: {error[:160]}", run=str(run.id))
        if error == PINNED_PATTERN_UNAVAILABLE and \
                world.registry.pinned(run.pattern, run.pattern_version) is not None:
            self.checker.fail("failure_has_cause", f"Run {run.id} failed as '{error}' but "
                              f"{run.pattern}@{run.pattern_version} is registered",
                              run=str(run.id))
        if error == LOST:
            self._check_lost(prev, run)
        if error == ABANDONED:
            self._check_abandoned(prev, run)

    def _check_lost(self, prev: Run, run: Run) -> None:
        if prev.status not in LOSABLE:
            self.checker.fail("lost_only_after_death", f"Run {run.id} failed as lost from "
                              f"{prev.status.value}", run=str(run.id))
        d = self.checker.deliveries.get((run.id, run.seq))
        live = self.checker.world.live_boot
        holder = d.claimed_boot if d is not None else None
        if live is not None and holder == live.id:
            self.checker.fail("lost_only_after_death", f"Run {run.id} failed as lost while its "
                              f"claim is held by the live {holder}", run=str(run.id))

    def _check_abandoned(self, prev: Run, run: Run) -> None:
        d = self.checker.deliveries.get((run.id, run.seq))
        live = self.checker.world.live_boot
        if prev.status not in LOSABLE or d is None or live is None \
                or d.claimed_boot != live.id:
            self.checker.fail("abandoned_only_after_sweep", f"Run {run.id} failed as "
                              f"abandoned from {prev.status.value} under the claim of "
                              f"{d.claimed_boot if d else None}", run=str(run.id))
            return
        job = self.checker.world.broker.jobs.get(d.key)
        if job is None:
            return
        info = job.info
        if info.status is not JobStatus.ABORTED or info.error != SWEPT:
            self.checker.fail("abandoned_only_after_sweep", f"Run {run.id} failed as "
                              f"abandoned while its job {d.key} is {info.status.value} "
                              f"({info.error})", run=str(run.id))

    def run_done(self, run: Run) -> None:
        applied = {c.identity for c in self.checker.world.effects.calls if c.applied}
        for name in EFFECTS_OF_PATTERN.get(run.pattern, ()):
            identity = f"{run.id}:{name}"
            if identity not in applied:
                self.checker.fail("done_after_effect", f"Run {run.id} ({run.pattern}) is DONE "
                                  f"but its effect {identity} was never applied", run=str(run.id))
