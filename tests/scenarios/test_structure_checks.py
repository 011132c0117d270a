"""The checker's structural invariants after a write read only the Runs it touched
(sim/checker.py): after every random write to a ledger that held them, the
incremental check finds a violation exactly when a full scan of the ledger does,
whether the ledger's tables are plain dicts (scanned whole after each write) or
the world's TrackedTables (read at the keys written since, sim/tracked.py)."""

from __future__ import annotations

import contextlib
import random
from types import SimpleNamespace

import pytest

from runtime.adapters.memory import MemoryLedger
from runtime.models import DeliveryState, RunStatus
from sim.checker import Checker, _Stop
from sim.tracked import TrackedTable
from tests.contract.ledger_records import make_delivery, make_run, uid

STRUCTURAL = {"single_claim", "sequences_gap_free", "session_fence"}


def _world(ledger: MemoryLedger) -> SimpleNamespace:
    return SimpleNamespace(ledger=ledger, trace=SimpleNamespace(emit=lambda *a, **k: None),
                           request_stop=lambda: None)


def _full_scan(ledger: MemoryLedger) -> set[str]:
    checker = Checker(_world(ledger))  # type: ignore[arg-type]
    with contextlib.suppress(_Stop):
        checker._check_structure()
    return {v.invariant for v in checker.violations}


def _incremental(checker: Checker) -> set[str]:
    with contextlib.suppress(_Stop):
        checker._structure_after_write(*checker._diff())
    found = {v.invariant for v in checker.violations}
    checker.violations.clear()
    return found


def _write(ledger: MemoryLedger, rng: random.Random) -> None:
    """One random write: a new Run, a claim, a rotation, a removed delivery, a
    settled or reopened Run, or a Run moved to another session."""
    runs = list(ledger.run_table.values())
    op = rng.randrange(6) if runs else 0
    if op == 0:
        run = make_run(uid(len(runs) + 1), session=rng.choice([None, "s-1", "s-2"]))
        ledger.run_table[run.id] = run
        ledger.delivery_table[(run.id, 0)] = make_delivery(run)
        return
    run = rng.choice(runs)
    keys = sorted(k for k in ledger.delivery_table if k[0] == run.id)
    if op == 1 and keys:
        key = rng.choice(keys)
        ledger.delivery_table[key] = ledger.delivery_table[key].model_copy(
            update={"state": DeliveryState.CLAIMED})
    elif op == 2:
        moved = run.model_copy(update={"seq": run.seq + rng.choice([1, 2])})
        ledger.run_table[run.id] = moved
        if rng.random() < 0.7:
            ledger.delivery_table[(run.id, moved.seq)] = make_delivery(moved)
    elif op == 3 and keys:
        del ledger.delivery_table[rng.choice(keys)]
    elif op == 4:
        status = rng.choice([RunStatus.DONE, RunStatus.QUEUED, RunStatus.RUNNING])
        ledger.run_table[run.id] = run.model_copy(update={"status": status})
    else:
        ledger.run_table[run.id] = run.model_copy(
            update={"session": rng.choice([None, "s-1", "s-2"])})


@pytest.mark.parametrize("tracked", [False, True], ids=["plain", "tracked"])
def test_incremental_structure_checks_agree_with_a_full_scan_after_every_write(
    tracked: bool,
) -> None:
    violations_seen = set()
    for seed in range(300):
        rng = random.Random(seed)
        ledger = MemoryLedger()
        if tracked:
            ledger.run_table = TrackedTable()
            ledger.delivery_table = TrackedTable()
        checker = Checker(_world(ledger))  # type: ignore[arg-type]
        for _ in range(40):
            _write(ledger, rng)
            incremental, full = _incremental(checker), _full_scan(ledger)
            assert incremental == full, (seed, incremental, full)
            violations_seen |= full
            if full:
                break  # the simulator stops at its first violation
    assert violations_seen == STRUCTURAL  # each rule was broken, and caught, somewhere


def test_a_tracked_diff_gives_the_rows_and_order_of_a_full_scan() -> None:
    """After every random write the checker's diff of TrackedTables lists the same
    changed rows, in the same order, and the same removed ones, as a scan of a plain
    copy of the same tables does."""
    for seed in range(200):
        rng = random.Random(seed)
        tracked, plain = MemoryLedger(), MemoryLedger()
        tracked.run_table, tracked.delivery_table = TrackedTable(), TrackedTable()
        fast, slow = Checker(_world(tracked)), Checker(_world(plain))  # type: ignore[arg-type]
        for _ in range(40):
            _write(tracked, random.Random(rng.random()))
            plain.run_table = dict(tracked.run_table)
            plain.delivery_table = dict(tracked.delivery_table)
            a, b = fast._diff(), slow._diff()
            assert (a[0], set(a[1]), a[2], set(a[3])) == (b[0], set(b[1]), b[2], set(b[3]))
            with contextlib.suppress(_Stop):
                fast._structure_after_write(*a)
            with contextlib.suppress(_Stop):
                slow._structure_after_write(*b)
            fast.violations.clear()
            slow.violations.clear()
            assert fast.runs == slow.runs and fast.deliveries == slow.deliveries
            assert not tracked.run_table.dirty and not tracked.delivery_table.dirty  # type: ignore[attr-defined]
