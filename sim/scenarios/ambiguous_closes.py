"""Scenario `ambiguous_closes`: the `leased_jobs` world with most store writes
ambiguous (applied, then the answer is lost), so the workers repeat their
closings (fail, schedule_retry and exhaust, after an overloaded or refused model
call) once they already committed. A repeat of the very closing is answered
with the job unchanged, not refused (seed 004_85033eb8fc772f12.txt, "Leases and
fences"; runtime/jobs/rules.py `check_lease`), whatever object carries the
reason: the memory store hands back fresh text as PostgreSQL does."""

from __future__ import annotations

from sim.faults.options import FaultOptions
from sim.scenarios import Scenario, leased_jobs, register

AMBIGUOUS_PER_WRITE = 0.35
"""Share of store writes whose answer is lost after the commit."""


def _ambiguous_writes(options: FaultOptions) -> FaultOptions:
    return options.model_copy(update={"ambiguous_per_write": AMBIGUOUS_PER_WRITE})


AMBIGUOUS_CLOSES = register(Scenario("ambiguous_closes", " ".join((__doc__ or "").split()),
                                     leased_jobs.drive, leased_jobs.heal, vessel=False,
                                     tune=_ambiguous_writes))
