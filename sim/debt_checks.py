"""Invariant of the evidence debts a boot keeps in memory (seed 000 "Events,
settlement, and waits").

A Run's terminal Step is owed from the moment its terminal truth committed until
a write proves it landed; the worker, the canceller, the engine and startup note
such a debt in the process's `evidence_debt` (Run id -> sequence), which the
relay pays. A debt is therefore only ever owed by a Run that is terminal at
exactly that sequence (terminal truth is final, so it stays so): a debt naming
a live Run means a hop recorded one before, or without, its terminal truth.

Read after every committed write, for the boots alive then; each debt entry is
judged once, when it is first seen (entries are few: a debt is paid within a
relay pass). Reads process state and ledger rows only: traces are unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from uuid import UUID

if TYPE_CHECKING:
    from sim.checker import Checker

INVARIANTS = (
    ("debt_after_truth", "an evidence debt a boot records names a Run that is terminal at "
     "exactly the debt's sequence: the terminal Step is owed only once terminal truth "
     "committed, never by a hop that ended without it",
     "seed 000 'Events, settlement, and waits' (Run truth first, then its Step; a missing "
     "terminal Step is repaired after confirming terminal truth)"),
)


class DebtChecks:
    def __init__(self, checker: Checker) -> None:
        self.checker = checker
        self.seen: set[tuple[int, UUID, int]] = set()
        """(boot, Run, sequence) debts already judged."""

    def after_write(self) -> None:
        world = self.checker.world
        runs = world.ledger.run_table
        for boot in world.alive_boots():
            debts = boot.vessel.worker.evidence_debt
            if not debts:
                continue
            for run_id, seq in list(debts.items()):
                key = (boot.number, run_id, seq)
                if key in self.seen:
                    continue
                self.seen.add(key)
                run = runs.get(run_id)
                if run is None or not run.status.terminal or run.seq != seq:
                    state = "absent" if run is None else f"{run.status.value} at hop {run.seq}"
                    self.checker.fail("debt_after_truth", f"boot {boot.number} owes the "
                                      f"terminal Step of Run {run_id} hop {seq}, which is "
                                      f"{state}", boot=boot.number, run=str(run_id), seq=seq)
