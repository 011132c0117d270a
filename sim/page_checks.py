"""Invariants of recovery's paging (issue M9: the recovery group's survivors).

Seed 000_81a5c720b14d934a.txt, "Cancellation, mutation, and recovery":
startup reconciliation recovers every CANCELLING, orphaned and QUEUED Run,
and the relays repeat bounded recovery page by page so that no Run drops
out of repair. A bug that stops after the first page (or never moves the
relay's forward cursor) goes unnoticed while every status holds fewer Runs
than a page; the `crowded` scenario holds more. Two rules:

- `startup_visits_every_run`: a Run that was CANCELLING, RUNNING,
  AWAITING_HARDWARE or QUEUED when a boot's reconciliation began, and is
  exactly the same record (status, sequence, updated_at: nobody touched it)
  when that startup reports done, is named in its reconciliation report;
- `relay_pages_every_run`: a Run that stays the same record in one status
  while a serving boot's relay reads that status's pages many times (four
  times the pages the status ever held, plus two) is listed by one of those
  reads: the forward cursor goes round every page;
- `startup_names_cleanup_debts`: a terminal Run that held its checkpoint when
  reconciliation began and still holds it when startup reports done is named
  in the report's `cleanup_owed` (startup retried the deletion and it failed):
  the report tells the truth about what is still owed;
- `page_cursor_names_a_listed_run`: every keyset cursor a boot passes to
  `page_runs` is None (the first page) or exactly the (updated_at, id) of
  the last Run of a page of the same statuses that boot was returned: a
  cursor assembled from two rows, or from a Run no page ended with, skips or
  repeats Runs at the page boundary however the pages happen to fall.

Like the rest of the checker these read the ledger's own tables, what the
boot's ledger seam returned to it (`page_runs`) and what the startup
reported to its caller; violations go through `Checker.fail`.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING
from uuid import UUID

from runtime.models import Run, RunStatus
from runtime.recovery.pages import PAGE_SIZE

if TYPE_CHECKING:
    from sim.checker import Checker

RECONCILED = (RunStatus.CANCELLING, RunStatus.RUNNING, RunStatus.AWAITING_HARDWARE,
              RunStatus.QUEUED)
"""The statuses whose every Run startup's report names (the waits are named only when
re-fired, so a visit leaves no trace there)."""

INVARIANTS = (
    ("startup_visits_every_run", "a Run CANCELLING, RUNNING, AWAITING_HARDWARE or QUEUED when "
     "a boot's reconciliation began, and untouched until its startup finished, is named in "
     "that startup's report: reconciliation pages past the first page",
     "seed 000 'Cancellation, mutation, and recovery' (startup retries CANCELLING, fences and "
     "classifies orphans, recovers every QUEUED Run's exact delivery)"),
    ("startup_names_cleanup_debts", "a terminal Run that held its checkpoint when a boot's "
     "reconciliation began and still holds it when its startup finished is named owed in "
     "that startup's report", "seed 000 'Cancellation, mutation, and recovery' (startup "
     "retries idempotent checkpoint deletion; cleanup failure is recorded debt)"),
    ("relay_pages_every_run", "a Run that stays untouched in one status while a serving "
     "boot's relay reads that status's pages again and again is listed by one of those "
     "reads: the forward cursor goes round every page",
     "seed 000 'Cancellation, mutation, and recovery' (relays repeat bounded recovery; old "
     "pages never drop out of repair and never starve newer Runs)"),
    ("page_cursor_names_a_listed_run", "every keyset cursor a boot pages Runs from is the "
     "first page's (none) or the (updated_at, id) of the last Run of a page of the same "
     "statuses it was returned", "seed 000 'Cancellation, mutation, and recovery' (bounded "
     "recovery page by page: a page starts right after the last Run of the one before)"),
)

Key = tuple[datetime, UUID]


def reads_allowed(most: int) -> int:
    """Page reads of one status within which every untouched Run of it is listed: each
    relay pass reads at most one revisit page and one forward page, and a Run the
    current forward sweep already passed is listed by the next whole sweep."""
    return 4 * (math.ceil(most / PAGE_SIZE) + 1) + 2


@dataclass
class _Watch:
    """One boot's relay reads of one status."""

    reads: int = 0
    most: int = 0
    """The most Runs this status held at any of these reads."""
    since: dict[UUID, tuple[Run, int]] = field(default_factory=dict)
    """Per Run in the status: its record and the read at which it was first seen so."""


@dataclass
class PageChecks:
    checker: Checker
    at_reconcile: dict[int, list[Run]] = field(default_factory=dict)
    """Per boot number: the Runs of RECONCILED statuses as its reconciliation began."""
    debts_at_reconcile: dict[int, set[UUID]] = field(default_factory=dict)
    """Per boot number: terminal Runs holding a checkpoint as its reconciliation began."""
    serving: set[int] = field(default_factory=set)
    """Boots whose startup finished: their page reads are the relays'."""
    watches: dict[tuple[int, RunStatus], _Watch] = field(default_factory=dict)
    page_ends: dict[tuple[int, tuple[RunStatus, ...]], set[Key]] = field(default_factory=dict)
    """Per boot and statuses: the (updated_at, id) of the last Run of each page returned."""

    def on_reconcile_started(self, boot: int) -> None:
        table = self.checker.world.ledger.run_table
        self.at_reconcile[boot] = [r for r in table.values() if r.status in RECONCILED]
        self.debts_at_reconcile[boot] = {
            run_id for run_id in self.checker.world.ledger.checkpoint_table
            if (run := table.get(run_id)) is not None and run.status.terminal}

    def on_startup_done(self, boot: int, visited: Collection[UUID],
                        cleanup_owed: Collection[UUID] = ()) -> None:
        """startup_visits_every_run and startup_names_cleanup_debts, as boot `boot`
        reports its reconciliation done."""
        self.serving.add(boot)
        held = self.checker.world.ledger.checkpoint_table
        unnamed = sorted((run_id for run_id in self.debts_at_reconcile.pop(boot, ())
                          if run_id in held and run_id not in cleanup_owed), key=str)
        if unnamed:
            self.checker.fail("startup_names_cleanup_debts", f"boot {boot}'s startup left "
                              f"the checkpoint of terminal Run {unnamed[0]} in place and "
                              "did not report it owed", boot=boot, run=str(unnamed[0]),
                              unnamed=len(unnamed))
        table = self.checker.world.ledger.run_table
        missed = sorted((r for r in self.at_reconcile.pop(boot, ())
                         if table.get(r.id) == r and r.id not in visited),
                        key=lambda r: (r.updated_at, r.id))
        if missed:
            run = missed[0]
            self.checker.fail("startup_visits_every_run", f"boot {boot}'s startup left "
                              f"{len(missed)} untouched {run.status.value} Runs out of its "
                              f"report, Run {run.id} among them", boot=boot,
                              run=str(run.id), missed=len(missed))

    def on_page(self, boot: int, statuses: Sequence[RunStatus], page: list[Run],
                cursor: Key | None = None) -> None:
        """page_cursor_names_a_listed_run and relay_pages_every_run, as a boot's ledger
        seam returns the page it read after `cursor`."""
        ends = self.page_ends.setdefault((boot, tuple(statuses)), set())
        if cursor is not None and cursor not in ends:
            self.checker.fail("page_cursor_names_a_listed_run", f"boot {boot} paged "
                              f"{'/'.join(s.value for s in statuses)} Runs after {cursor}, "
                              "which is not where any page it was returned ended",
                              boot=boot, run=str(cursor[1]))
        if page:
            ends.add((page[-1].updated_at, page[-1].id))
        if boot not in self.serving or len(statuses) != 1:
            return
        status = statuses[0]
        watch = self.watches.setdefault((boot, status), _Watch())
        watch.reads += 1
        listed = {r.id for r in page}
        now = self.checker.runs_in(status)  # the rows writes touched keep it current
        if now is None:
            now = {r.id: r for r in self.checker.world.ledger.run_table.values()
                   if r.status is status}
        watch.most = max(watch.most, len(now))
        oldest = watch.reads - reads_allowed(watch.most)  # a count begun by then is stale
        since: dict[UUID, tuple[Run, int]] = {}
        stale: tuple[int, UUID] | None = None  # the earliest-begun stale count, in one pass
        for run_id, run in now.items():
            kept = watch.since.get(run_id)
            if run_id in listed or kept is None or kept[0] != run:
                kept = (run, watch.reads)  # listed now, or changed: counts afresh
            since[run_id] = kept
            if kept[1] <= oldest and (stale is None or (kept[1], run_id) < stale):
                stale = (kept[1], run_id)
        watch.since = since
        if stale is not None:
            first, run_id = stale
            self.checker.fail("relay_pages_every_run", f"boot {boot}'s relay read the "
                              f"{status.value} pages {watch.reads - first} times (at most "
                              f"{watch.most} Runs) without listing Run {run_id}, untouched "
                              "all along", boot=boot, run=str(run_id), status=status.value)
