"""Invariants of a hop's Step writer in time: its linger and its fold into settlement
(issue 17, M14; seed 000_81a5c720b14d934a.txt "Events, settlement, and waits").

The fault proxy over the ledger (`sim.faults.proxies.SimLedger`) reports each Step
append as it starts and as it ends, and each settle_run attempt as it starts, with
the caller's frame; the writer making an append (or the hop settling) is found in
those frames, as `group_takes_queued` finds it. The checker keeps its own record
of each writer's appends in flight; it reads writer and hop state, never calls
them, and adds no await and no draw, so traces are unchanged.
"""

from __future__ import annotations

import weakref
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from uuid import UUID

import trio

from runtime.events.hop import HopEvents
from runtime.events.writer import GROUP_COMMIT_LIMIT, StepWriter
from runtime.keys import hop_key

if TYPE_CHECKING:
    from types import FrameType

    from sim.checker import Checker

FOLD_WAIT_S = 1.0
"""The checker's copy of how long a settling hop waits for its writer's append in
flight before it settles without folding its Steps in (runtime.events.hop)."""
LINGER_S = 0.05
"""The checker's copy of the designed group-commit linger (runtime.seams
`Deps.step_linger_s`): the longest a Step queued behind an append waits for the
next one. A deliberate change of the linger changes this copy with it."""
EPS = 1e-6
WRITER_APPENDS = ("_process", "_process_group")
FRAMES = 12
"""Frames walked up from a ledger call to the writer or hop making it (the retry
wrapper, the retry watch and the worker's own retry lie between)."""

INVARIANTS = (
    ("linger_holds", "a group-committing Step writer that lingers holds each group for "
     "its linger unless something hurries it: an append nobody hurries (no barrier "
     "waiting, not closing, no repair, fewer Steps than a group or the queue holds) "
     "starts no sooner than the linger after the writer's previous append ended (after "
     "its hop's claim, for the first)",
     "issue 17, M14 (a hop's writer holds a group it could start for at most linger_s "
     "while nobody waits on it; a barrier, a repair, a full group or queue and closing "
     "end the linger at once)"),
    ("full_group_not_held", "a group-committing Step writer that lingers does not hold a "
     "full group: when an append ends with at least a group's worth of Steps (64) queued "
     "behind it, the writer's next append starts at that same instant with the first of "
     "them",
     "issue 17, M14 (a hop's writer holds a group only while nobody needs it written; a "
     "full group or queue ends the linger at once); seed 000 'Events, settlement, and "
     "waits' (Steps are written in publish order, one append in flight)"),
    ("linger_bounded", "a group-committing Step writer holds Steps queued behind its "
     "append at most the designed linger (50 ms): when an append ends with Steps queued, "
     "the append carrying the first of them starts no later than that linger after",
     "issue 17, M14 (group commit delays a Step's durability by at most linger_s; live "
     "readers and resumed streams see Steps that late at most)"),
    ("restored_steps_first", "a hop whose settlement, carrying the Steps its lingering "
     "writer held, did not apply gives them back: the writer's next appends carry exactly "
     "those Steps (same kinds, same metadata), in publish order, ahead of anything else, "
     "and by the time the hop returns fenced all of them were appended unless an append "
     "failed",
     "issue 17, M14 (a settlement that did not apply gives the lifecycle Steps back to "
     "the writer, which writes them as before); seed 000 'Events, settlement, and waits' "
     "(non-token events become Step rows in publish order)"),
    ("settle_folds_steps", "a hop settles its terminal truth only once its Step writer "
     "has no append in flight, so the settlement carries the Steps still queued and the "
     "terminal Step behind every Step written; it settles alone beside an append in "
     "flight only after that writer's appends kept it busy for the whole fold wait (1 s); "
     "and it never flushes a lingering writer first (no barrier hurries that writer "
     "before the settlement), so what the writer holds rides in the settlement",
     "issue 17, M14 (fold_terminal waits at most FOLD_WAIT_S until no append is in "
     "flight, then hands the queued Steps and the terminal Step to settle_run)"),
    ("terminal_flush_before_cleanup", "a hop whose terminal truth committed reaches "
     "settle.evidence_written (before its checkpoint cleanup) only once its Step writer "
     "has written every Step it accepted, the terminal one included, unless an append "
     "of that writer failed (the Step is then owed to the relay); a Step that rode in "
     "the settlement was taken from the writer and is not waited for",
     "seed 000 'Events, settlement, and waits' (Run truth first, then its terminal Step, "
     "then cleanup); runtime.faults catalogue (settle.evidence_written: terminal Step "
     "written, checkpoint not yet deleted)"),
)


@dataclass
class Busy:
    """A writer's appends as the proxy saw them."""

    in_flight: int = 0
    since: float = 0.0
    """When its appends began to follow one another without a moment's gap."""
    ended: float | None = None
    """When its last append ended."""


def _frame(caller: FrameType | None, names: tuple[str, ...]) -> FrameType | None:
    for _ in range(FRAMES):
        if caller is None or caller.f_code.co_name in names:
            return caller
        caller = caller.f_back
    return None


class WriterChecks:
    def __init__(self, checker: Checker) -> None:
        self.checker = checker
        self.busy: weakref.WeakKeyDictionary[StepWriter, Busy] = weakref.WeakKeyDictionary()
        self.claimed: dict[tuple[str, UUID, int], float] = {}
        """When each boot's claim of (Run, sequence) committed: before its hop's writer."""
        self.judged: weakref.WeakSet[StepWriter] = weakref.WeakSet()
        """Writers whose hop's first settle_run attempt was judged (retries are not)."""
        self.flushed: weakref.WeakSet[StepWriter] = weakref.WeakSet()
        self.full: weakref.WeakKeyDictionary[StepWriter, tuple[float, object]] = (
            weakref.WeakKeyDictionary())
        """Lingering writers whose last append ended with a full group queued: when it
        ended, and the Step then first in the queue (full_group_not_held)."""
        self.behind: weakref.WeakKeyDictionary[StepWriter, tuple[float, object]] = (
            weakref.WeakKeyDictionary())
        """Lingering writers whose last append ended with Steps queued: when it ended,
        and the Step then first in the queue (linger_bounded)."""
        self.restored: weakref.WeakKeyDictionary[StepWriter, deque[tuple[str, Any]]] = (
            weakref.WeakKeyDictionary())
        """Steps a settling hop took from its writer, in order: if the settlement does
        not apply they come back, and the writer's next appends carry them first."""
        self.folding: dict[tuple[str, str], StepWriter] = {}
        """The writer of each hop (boot id, hop key) that folded Steps into its
        settlement, until the hop returns (`on_fenced` judges a fenced one)."""
        """Lingering writers that started an append because a barrier waited on them
        (not closing, no repair): before terminal truth only a settling hop's fold
        could be that waiter, for a parked hop's and a terminal path's flushes come
        after their settlement."""

    def on_claim(self, boot_id: str, run_id: UUID, seq: int) -> None:
        self.claimed[(boot_id, run_id, seq)] = trio.current_time()

    def append_started(self, caller: FrameType | None, boot_id: str) -> StepWriter | None:
        """A Step append begins (before any await); the writer making it, if a writer's."""
        frame = _frame(caller, WRITER_APPENDS)
        writer = None if frame is None else frame.f_locals.get("self")
        if not isinstance(writer, StepWriter):
            return None
        now = trio.current_time()
        busy = self.busy.setdefault(writer, Busy())
        ended = busy.ended
        if busy.in_flight == 0 and (ended is None or now > ended):
            busy.since = now
        busy.in_flight += 1
        assert frame is not None
        group = frame.f_locals.get("group") or [frame.f_locals.get("item")]
        if (writer._linger_s > 0 and writer._waiters > 0 and not writer._closing
                and writer._repair is None):
            self.flushed.add(writer)
        if writer._linger_s > 0 and group[0] is not None and group[0].repair is None:
            self.checker._guarded(lambda: self._linger(writer, len(group), ended, boot_id, now))
        expected = self.restored.get(writer)
        if expected:
            self.checker._guarded(lambda: self._restored(writer, group, expected))
        behind = self.behind.pop(writer, None)
        if behind is not None and group[0] is behind[1]:
            self.checker._guarded(lambda: self._bounded(writer, len(group), behind[0], now))
        full = self.full.pop(writer, None)
        if full is not None and group[0] is full[1]:
            self.checker._guarded(lambda: self._full_group(writer, len(group), full[0], now))
        return writer

    def append_ended(self, writer: StepWriter) -> None:
        busy = self.busy[writer]
        busy.in_flight -= 1
        busy.ended = trio.current_time()
        queue = writer._queue
        if writer._linger_s > 0 and queue:
            self.behind[writer] = (busy.ended, queue[0])
        else:
            self.behind.pop(writer, None)
        if (writer._linger_s > 0 and writer._batch is not None
                and len(queue) >= min(GROUP_COMMIT_LIMIT, writer._capacity)):
            self.full[writer] = (busy.ended, queue[0])
        else:
            self.full.pop(writer, None)

    def _restored(self, writer: StepWriter, group: list[Any], expected: deque[tuple[str, Any]],
                  ) -> None:
        """Only a folded settlement that did not apply lets this writer append again
        (one that applied detached it with nothing queued): what it appends first is
        what the hop took, given back ahead of anything queued since."""
        for item in group:
            if not expected:
                return
            kind, data = expected.popleft()
            if item.repair is None and item.kind == kind and item.data == data:
                continue
            expected.clear()
            self.checker.fail("restored_steps_first", f"the Step writer of Run "
                              f"{writer.run_id} (seq {writer.seq}) appends {item.kind!r} "
                              f"{item.data!r} where the Step {kind!r} {data!r} its hop took "
                              "for a settlement that did not apply comes back first",
                              run=str(writer.run_id))
            return

    def on_returned(self, boot_id: str, key: str, fenced: bool) -> None:
        """A hop handler returned (not raised: its writer left normally and wrote what
        it held). Fenced after folding Steps into its settlement, its writer got them
        back, so it appended them all unless an append failed (a fault, or the ledger
        refusing Steps behind the Run's terminal one)."""
        writer = self.folding.pop((boot_id, key), None)
        if writer is None or not fenced:
            return
        expected = self.restored.get(writer)
        gen = writer._gen
        if not expected or gen.error is not None or gen.dropped:
            return
        kind, data = expected[0]
        self.checker.fail("restored_steps_first", f"hop {key} of {boot_id} returned fenced "
                          f"and its Step writer ended without the {len(expected)} Step(s) "
                          f"it took for that settlement ({kind!r} {data!r} first): they "
                          "never came back", run=str(writer.run_id))

    def _bounded(self, writer: StepWriter, taken: int, ended: float, now: float) -> None:
        """The append carrying the Step first in the queue when the previous append
        ended: the writer goes from that end straight into its linger (no await
        between), so it starts no later than the designed linger after; a barrier, a
        repair, a full group or closing only makes it sooner."""
        if now - ended <= LINGER_S + EPS:
            return
        self.checker.fail("linger_bounded", f"the Step writer of Run {writer.run_id} (seq "
                          f"{writer.seq}) starts its append of {taken} Step(s) "
                          f"{now - ended:.6g} s after its previous append ended with them "
                          f"queued: longer than the designed {LINGER_S:g} s linger",
                          run=str(writer.run_id))

    def _full_group(self, writer: StepWriter, taken: int, ended: float, now: float) -> None:
        """The append that carries the Step first in the queue when the previous append
        ended with a full group queued: with no await in time between (the writer only
        yields scheduler turns to let a group fill), it starts at that same instant. A
        Step taken for a settlement and given back is a new queue entry, never judged."""
        if now - ended <= EPS:
            return
        self.checker.fail("full_group_not_held", f"the Step writer of Run {writer.run_id} "
                          f"(seq {writer.seq}) starts its append of {taken} Step(s) "
                          f"{now - ended:.6g} s after its previous append ended with a full "
                          f"group (at least {GROUP_COMMIT_LIMIT} Steps) queued: it lingered "
                          "over a full group", run=str(writer.run_id))

    def _linger(self, writer: StepWriter, taken: int, ended: float | None, boot_id: str,
                now: float) -> None:
        queued = taken + len(writer._queue)
        if (writer._closing or writer._waiters > 0 or writer._repair is not None
                or queued >= GROUP_COMMIT_LIMIT or queued >= writer._capacity):
            return  # hurried: the linger ends at once
        since = ended if ended is not None else self.claimed.get(
            (boot_id, writer.run_id, writer.seq))
        if since is None or now - since >= writer._linger_s - EPS:
            return
        self.checker.fail("linger_holds", f"the Step writer of Run {writer.run_id} (seq "
                          f"{writer.seq}) starts an append of {taken} Step(s) "
                          f"{now - since:.6g} s after its "
                          f"{'previous append ended' if ended is not None else 'claim'}, "
                          f"inside its {writer._linger_s:g} s linger, with nothing hurrying "
                          "it", run=str(writer.run_id))

    def settle_started(self, caller: FrameType | None, args: tuple[Any, ...],
                       kwargs: dict[str, Any]) -> None:
        """A settle_run attempt begins (before any await): settle_folds_steps, judged at
        the first attempt of a hop's settlement."""
        frame = _frame(caller, ("_hop",))
        events = None if frame is None else frame.f_locals.get("events")
        if not isinstance(events, HopEvents):
            return
        writer = events.writer
        if writer in self.judged:
            return
        self.judged.add(writer)
        if events.folded and events._taken:
            self.restored[writer] = deque(events._taken)
            self.folding[(events.deps.boot_id, hop_key(writer.run_id, writer.seq))] = writer
        busy = self.busy.get(writer)
        channel = events.channel
        if (writer in self.flushed and channel is not None and not channel._closed
                and channel._terminal is None):
            self.checker.fail("settle_folds_steps", f"a hop of Run {writer.run_id} settles "
                              "after a barrier flushed its lingering Step writer: the Steps "
                              "it held were written alone instead of riding in the "
                              "settlement", run=str(writer.run_id))
        if (busy is None or busy.in_flight == 0 or channel is None or channel._closed
                or channel._terminal is not None):
            return  # nothing in flight; or no channel to fold from, or one a cancel ended
            # (its run.cancelled, teed to this writer, may be the append in flight)
        step = args[4] if len(args) > 4 else kwargs.get("step")
        now = trio.current_time()
        if step is not None:
            self.checker.fail("settle_folds_steps", f"a hop of Run {writer.run_id} settles "
                              f"with its Steps folded in while its writer's append (busy "
                              f"{now - busy.since:.6g} s) is in flight",
                              run=str(writer.run_id))
        if now - busy.since < FOLD_WAIT_S - EPS:
            self.checker.fail("settle_folds_steps", f"a hop of Run {writer.run_id} settles "
                              f"alone while its writer's appends have kept it busy only "
                              f"{now - busy.since:.6g} s: the fold waits up to "
                              f"{FOLD_WAIT_S:g} s for them to fold its terminal Step in",
                              run=str(writer.run_id))

    def on_evidence_point(self, caller: FrameType | None, boot_id: str) -> None:
        """A hop reached settle.evidence_written: its writer has nothing accepted and
        unwritten in its generation, or that generation latched a failed append."""
        frame = _frame(caller, ("_hop",))
        events = None if frame is None else frame.f_locals.get("events")
        if not isinstance(events, HopEvents):
            return
        gen = events.writer._gen
        if gen.error is not None or gen.settled >= gen.accepted:
            return
        self.checker.fail("terminal_flush_before_cleanup", f"the hop of Run "
                          f"{events.writer.run_id} (seq {events.writer.seq}) on {boot_id} "
                          f"reached settle.evidence_written with "
                          f"{gen.accepted - gen.settled} accepted Step(s) unwritten "
                          f"(folded={events.folded}) and no failed append",
                          run=str(events.writer.run_id))
