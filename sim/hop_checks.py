"""Invariants of one hop as the broker sees it: what the hop handler returns.

The broker's worker (SAQ stores it as the job's result) learns a hop's
outcome from what `Worker.perform_run` returns. `sim.mutation_checks`
watches every call of the handler and the ledger writes it made that
achieved something (a claim, a settlement, a park); when the call ends the
outcome is compared with them:

- `hop_ends_with_an_outcome`: a hop returns a HopOutcome, never raises,
  unless its process died (ProcessCrashed) or it was cancelled (an abort, a
  shutdown); storage errors outlasting the retry are raised by design only
  past RETRY_BUDGET_S, which no injected blip reaches: only a stuck claim
  (FaultKind.CLAIM_STUCK, every claim of that delivery failing) outlasts it,
  and a hop that raised the storage error of its own stuck claim did so by design.
- `settled_hop_releases_checkpoint`: a hop that returns SETTLED leaves its
  Run holding no checkpoint unless a fault struck during it (a failed deletion
  is a debt; a resumed hop skipping it survived mutation, M9).
- `hop_outcome_truthful`: SKIPPED exactly when the call committed no claim;
  SETTLED only after its settlement landed; PARKED only after its park
  landed; FENCED only when neither did.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING
from uuid import UUID

import anyio

from runtime.adapters.open_run import OPEN_STATUSES
from runtime.errors import LedgerUnavailable, ProcessCrashed
from sim.mutation_checks import CURRENT_HOP

if TYPE_CHECKING:
    from sim.checker import Checker
    from sim.mutation_checks import HopCall

TOUCH_EVERY_S = 30.0
"""The checker's copy of the hop's heartbeat period (seed 000: a 120 s heartbeat)."""
TOUCH_SLACK_S = 0.5
LANES = {"runs": 4, "rites": 2}
"""The checker's copy of the in-process lane bounds (runtime.worker.Lanes)."""
EPS = 1e-6
HEARTBEAT_WINDOW_S = 120.0
"""The broker's heartbeat timeout: a stall within it may have let the job's heartbeat lapse."""
EVIDENCE_FAULTS = ('"point":"ledger.steps"', '"point":"ledger.append_step"',
                   '"point":"ledger.append_steps"',
                   '"point":"steps.append"', '"event":"boot.crash"', '"event":"boot.partition"')
"""A partition (FaultKind.BOOT_PARTITION) fails a boot's Step appends like an outage."""

TERMINAL_STEPS = frozenset({"run.done", "run.failed", "run.cancelled"})

PARKS = frozenset({"park_consent", "park_delegate", "park_service"})
"""A hardware wait keeps the hop (runtime.stasis.waits): it never parks one."""

INVARIANTS = (
    ("hop_ends_with_an_outcome", "a hop handler returns an outcome unless its process died or "
     "it was cancelled: no exception escapes a hop", "seed 000 'Admission and exact claim'"),
    ("hop_outcome_truthful", "the outcome a hop reports to the broker matches what it "
     "committed: skipped without a claim, settled after its settlement, parked after its "
     "park (with its run.parked Step unless a fault struck), fenced when neither landed",
     "seed 000 'Admission and exact claim', 'Events, settlement, and waits'"),
    ("hop_heartbeat", "a live hop touches its broker job every 30 s, so the heartbeat "
     "sweep never aborts the job of a hop still running in a live process",
     "seed 000 'Admission and exact claim'"),
    ("settled_hop_releases_checkpoint", "a hop that settles its Run leaves it holding no "
     "checkpoint, unless a fault struck during the hop (the deletion may have failed: a "
     "debt the relay pays)", "seed 000 'Events, settlement, and waits' (cleanup follows "
     "terminal truth; its failure is a debt, never the normal path)"),
    ("settled_hop_owes_evidence", "a hop that settles its Run leaves its terminal Step "
     "written or owed: when the Step is not in the ledger as the hop returns, its boot "
     "records the evidence debt (Run at that sequence) for its relay to pay",
     "seed 000 'Events, settlement, and waits' (a terminal Step that did not land is evidence "
     "debt, repaired later; the terminal publish is best effort and bounded)"),
    ("cancelled_hop_keeps_outcome", "a hop cancelled (an abort, a graceful shutdown) once "
     "its final node returned still settles that outcome: it leaves its Run open under "
     "its claim only if the settlement could not be written",
     "seed 000 'Events, settlement, and waits' (a hop's publishes are best effort, bounded "
     "and shielded, so a cancellation arriving as a node returns cannot lose its outcome)"),
    ("lane_bounds", "a process runs at most 4 hops at once in its runs lane and 2 in its "
     "rites lane", "seed 000 'Admission and exact claim'"),
)


class HopChecks:
    def __init__(self, checker: Checker) -> None:
        self.checker = checker
        self.lanes: Counter[tuple[str, str]] = Counter()

    @contextmanager
    def lane(self, boot_id: str, queue: str) -> Iterator[None]:
        """One broker delivery occupying a slot of `queue`'s lane (duplicates share it)."""
        self.lanes[(boot_id, queue)] += 1
        n = self.lanes[(boot_id, queue)]
        if n > LANES.get(queue, 1):
            self.checker._guarded(lambda: self.checker.fail(
                "lane_bounds", f"{boot_id} runs {n} hops at once in its {queue} lane"))
        try:
            yield
        finally:
            self.lanes[(boot_id, queue)] -= 1

    def touched(self, key: str) -> None:
        call = CURRENT_HOP.get()
        if call is None or call.key != key:
            return
        now = anyio.current_time()
        world = self.checker.world
        if call.touches:
            gap = now - call.touches[-1]
            frozen = world.stalled_within(call.boot_id, call.touches[-1], now)  # a zombie
            if not frozen and not TOUCH_EVERY_S - EPS <= gap <= TOUCH_EVERY_S + TOUCH_SLACK_S:
                self.checker._guarded(lambda: self.checker.fail(
                    "hop_heartbeat", f"hop {key} touched its job {gap:.6g} s after its "
                    f"previous touch, not every {TOUCH_EVERY_S:g} s"))
        call.touches.append(now)

    def swept(self, key: str) -> None:
        mc = self.checker.mutation_checks
        world = self.checker.world
        now = anyio.current_time()
        # A stalled boot touches nothing: the sweep retiring its job is what presumes it dead.
        live = [c for c in mc.running if c.key == key and c.claimed
                and any(b.alive for b in world.boots if b.id == c.boot_id)
                and not world.stalled_within(c.boot_id, now - HEARTBEAT_WINDOW_S, now)]
        if live:
            self.checker._guarded(lambda: self.checker.fail(
                "hop_heartbeat", f"the heartbeat sweep aborted {key} while its hop still "
                f"runs in {live[0].boot_id} ({len(live[0].touches)} touches)"))

    def raised(self, call: HopCall, exc: Exception) -> None:
        if isinstance(exc, ProcessCrashed) or (isinstance(exc, ExceptionGroup) and all(
                isinstance(e, ProcessCrashed) for e in exc.exceptions)):
            return
        if isinstance(exc, LedgerUnavailable) and not call.claimed \
                and call.key in self.checker.world.stuck_claims:
            return  # its claim kept failing past the retry budget (FaultKind.CLAIM_STUCK)
        self.checker.fail("hop_ends_with_an_outcome", f"hop {call.key} of {call.boot_id} raised "
                          f"{type(exc).__name__}: {exc}"[:300])

    def cancelled(self, call: HopCall) -> None:
        """cancelled_hop_keeps_outcome, read as a cancelled hop ends in a live process."""
        if not call.outcome_known or not call.claimed:
            return
        boot = next((b for b in self.checker.world.boots if b.id == call.boot_id), None)
        if boot is None or not boot.alive:
            return  # a crash: the process and its hop are gone
        _, run_id, seq = call.key.split(":")
        run = self.checker.world.ledger.run_table.get(UUID(run_id))
        if run is None or run.seq != int(seq) or run.status not in OPEN_STATUSES:
            return
        if "settle_run" in call.last_answer or \
                self.checker.world.ledger_down_until > call.claimed_at:
            return  # the settlement was tried (and fenced), or the database was down
        self.checker.fail("cancelled_hop_keeps_outcome", f"hop {call.key} of {call.boot_id} "
                          f"was cancelled after its final node returned and left its Run "
                          f"{run.status.value} without settling", run=run_id)

    def returned(self, call: HopCall, outcome: object) -> None:
        value = getattr(outcome, "value", outcome)
        settled = "settle_run" in call.wrote
        parked = bool(PARKS.intersection(call.wrote))
        # A park applied by an ambiguous commit whose retry was then refused (a cancel
        # moved the Run on in between) is a park the hop could not know of: fenced.
        park_answered = any(call.last_answer.get(name, False) for name in PARKS)
        claimed = call.claimed
        expected_ok = {
            "skipped": not claimed,
            "settled": claimed and settled,
            "parked": claimed and parked and not settled,
            "fenced": claimed and not settled and not park_answered,
        }
        if value not in expected_ok:
            self.checker.fail("hop_outcome_truthful", f"hop {call.key} returned {outcome!r}")
        if not expected_ok[str(value)]:
            self.checker.fail("hop_outcome_truthful", f"hop {call.key} of {call.boot_id} "
                              f"returned {value} after claim={claimed}, "
                              f"writes={call.wrote}")
        self.checker.writer_checks.on_returned(call.boot_id, call.key, value == "fenced")
        if value == "parked":
            self._parked_evidence(call)
        if value == "settled":
            self._released(call)
            self._owed(call)

    def _released(self, call: HopCall) -> None:
        """settled_hop_releases_checkpoint, read as the settling hop returns."""
        _, run_id, _seq = call.key.split(":")
        world = self.checker.world
        if UUID(run_id) not in world.ledger.checkpoint_table:
            return
        if any('"fault.fired"' in line or '"boot.' in line
               for line in world.trace.lines[call.since:]) \
                or world.ledger_down_until > call.claimed_at:
            return  # the deletion may have failed: the checkpoint is the relay's debt
        self.checker.fail("settled_hop_releases_checkpoint", f"hop {call.key} of "
                          f"{call.boot_id} settled its Run and left its checkpoint, with no "
                          "fault to excuse it", run=run_id)

    def _owed(self, call: HopCall) -> None:
        """settled_hop_owes_evidence, read as the settling hop returns (its debt, if
        any, was recorded as the hop ended, with no await since)."""
        _, run_id, seq = call.key.split(":")
        rid = UUID(run_id)
        world = self.checker.world
        if any(s.kind in TERMINAL_STEPS for s in world.ledger.step_log.get(rid, [])):
            return
        boot = next((b for b in world.boots if b.id == call.boot_id), None)
        if boot is None or boot.worker.evidence_debt.get(rid) == int(seq):
            return
        self.checker.fail("settled_hop_owes_evidence", f"hop {call.key} of {call.boot_id} "
                          "settled its Run without its terminal Step and owes no evidence "
                          "debt for it", run=run_id)

    def _parked_evidence(self, call: HopCall) -> None:
        _, run_id, seq = call.key.split(":")
        world = self.checker.world
        steps = world.ledger.step_log.get(UUID(run_id), [])
        if any(s.kind == "run.parked" and s.seq == int(seq) for s in steps):
            return
        if any(s.seq > int(seq) for s in steps):
            # The hop sends its service attempt after parking and publishes run.parked
            # only then. When that send outlasts the park (the attempt failed, the relay
            # readmitted the Run and a later hop claimed it: it wrote a Step of a later
            # sequence before this hop returned), the channel is the later hop's and the
            # late run.parked has no writer of this hop to go to; when it outlasts the
            # whole Run, the ledger refuses it behind the terminal Step, which closes the
            # log (terminal_step_is_last). Found at cancel_children seed 4, profile
            # default: a service submit failing twice in 0.33 s.
            return
        if any(mark in line for line in world.trace.lines[call.since:]
               for mark in EVIDENCE_FAULTS) or world.ledger_down_until > call.claimed_at:
            return  # a Step fault, a crash or a database outage may have taken it
        self.checker.fail("hop_outcome_truthful", f"hop {call.key} parked without its "
                          "run.parked Step, and no fault struck its evidence")
