"""The Ledger contract: a Run takes at most one terminal Step, whoever writes it
(issue 15, M11; seed 000_81a5c720b14d934a.txt, "Events, settlement, and
waits"), run against every implementation.

The two-Vessel soak found two live boots both failing the same orphan Run (a
dead boot's hop) and both writing its terminal Step. Each process reads the
durable Steps before it repairs, but the read and the append of two processes
are not one section, so the ledger itself refuses the second terminal Step
in the append's transaction and returns the first; a group commit drops the
terminal items the Run may no longer take. The PostgreSQL case also races
two ledgers (two pools, as two Vessels have) on one database.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest

from runtime.events.model import TERMINAL_KINDS
from runtime.models import RunStatus, Settlement, Step
from runtime.seams import Ledger
from tests.contract.ledger_impls import postgres_ledger
from tests.contract.ledger_records import at, runs_for_steps, uid
from tests.contract.test_ledger_waits_contract import running

pytestmark = pytest.mark.anyio


def terminal(steps: list[Step]) -> list[tuple[str, dict[str, Any]]]:
    return [(s.kind, s.data) for s in steps if s.kind in TERMINAL_KINDS]


async def test_a_second_terminal_step_is_refused_and_the_first_returned(ledger: Ledger) -> None:
    a, b = await runs_for_steps(ledger, 1, 2)
    await ledger.append_step(a, 0, "run.claimed", {}, at(1))
    first = await ledger.append_step(a, 0, "run.failed", {"error": "lost"}, at(2))
    again = await ledger.append_step(a, 0, "run.failed", {"error": "lost", "repaired": True},
                                     at(3))
    other = await ledger.append_step(a, 0, "run.done", {}, at(4))
    assert again == first and other == first  # nothing written: the first Step stands
    # Nor any later Step: the terminal Step closes the log (a zombie hop's late Step,
    # issue 18 item 2, found by the simulator's zombies scenario).
    later = await ledger.append_step(a, 0, "node.completed", {}, at(5))
    assert later == first
    steps = await ledger.steps(a)
    assert [s.kind for s in steps] == ["run.claimed", "run.failed"]
    assert await ledger.append_step(b, 0, "run.cancelled", {}, at(6))  # another Run


async def test_a_group_drops_the_terminal_items_the_run_may_no_longer_take(
    ledger: Ledger,
) -> None:
    a, b = await runs_for_steps(ledger, 1, 2)
    written = await ledger.append_steps(
        a, 0, [("node.completed", {"n": 1}), ("run.done", {}), ("run.failed", {})], at(1))
    assert [(s.index, s.kind) for s in written] == [(0, "node.completed"), (1, "run.done")]
    written = await ledger.append_steps(a, 0, [("node.completed", {"n": 2}),
                                               ("run.cancelled", {})], at(2))
    assert written == []  # the log is closed: nothing after its terminal Step
    written = await ledger.append_steps(b, 0, [("node.completed", {}), ("run.done", {}),
                                               ("node.completed", {"late": True})], at(2))
    assert [s.kind for s in written] == ["node.completed", "run.done"]
    assert await ledger.append_steps(a, 0, [("run.done", {})], at(3)) == []  # nothing left
    assert terminal(await ledger.steps(a)) == [("run.done", {})]
    assert await ledger.append_steps(b, 0, [("run.failed", {"error": "x"})], at(5)) == []
    assert len(await ledger.steps(b)) == 2


async def test_a_refused_terminal_step_still_pays_the_evidence_debt(ledger: Ledger) -> None:
    run = await running(ledger, 1)
    await ledger.append_step(run.id, 0, "run.done", {}, at(5))  # a Step before truth
    done = await ledger.settle_run(run.id, 0, Settlement(status=RunStatus.DONE), at(6))
    assert done is not None
    assert await ledger.evidence_debts(None, 10) == []  # its one terminal Step is written
    assert (await ledger.append_step(run.id, 0, "run.done", {"repaired": True}, at(7))).index == 0
    assert await ledger.evidence_debts(None, 10) == []


async def _race(appenders: list[Callable[[], Any]]) -> None:
    async with anyio.create_task_group() as tg:
        for append in appenders:
            tg.start_soon(append)


def _writers(ledger: Ledger, n: int, base: int) -> list[Callable[[], Any]]:
    """Terminal writers of Run uid(n) as several boots' repairs and hops would
    race: single appends of every terminal kind and group commits ending in one."""
    run_id = uid(n)
    out: list[Callable[[], Any]] = []
    for i, kind in enumerate(sorted(TERMINAL_KINDS) * 2):
        out.append(lambda kind=kind, i=i: ledger.append_step(
            run_id, 0, kind, {"writer": i}, at(base + i)))
        out.append(lambda kind=kind, i=i: ledger.append_steps(
            run_id, 0, [("node.completed", {"writer": i}), (kind, {"writer": i})],
            at(base + i)))
    return out


async def test_concurrent_terminal_writers_leave_exactly_one_terminal_step(
    ledger: Ledger,
) -> None:
    await runs_for_steps(ledger, 1)
    await _race(_writers(ledger, 1, 0))
    steps = await ledger.steps(uid(1))
    assert len(terminal(steps)) == 1
    assert [s.index for s in steps] == list(range(len(steps)))  # gap-free all the same
    assert steps[-1].kind in TERMINAL_KINDS  # nothing lands after it


@pytest.mark.postgres
async def test_two_vessels_racing_on_one_database_write_one_terminal_step(
    pg_fresh_dsn: str, anyio_backend: str
) -> None:
    """Two ledgers with their own pools on one database (two Vessels): every
    Run they race on ends with exactly one terminal Step."""
    if anyio_backend != "asyncio":
        pytest.skip("psycopg's AsyncConnection does not run under trio")
    async with postgres_ledger(pg_fresh_dsn, max_size=4) as one, \
            postgres_ledger(pg_fresh_dsn, max_size=4) as two:
        await runs_for_steps(one, *range(1, 6))
        for n in range(1, 6):
            await _race([*_writers(one, n, 0), *_writers(two, n, 100)])
        for n in range(1, 6):
            steps = await one.steps(uid(n))
            assert len(terminal(steps)) == 1, [s.kind for s in steps]
            assert [s.index for s in steps] == list(range(len(steps)))
            assert steps[-1].kind in TERMINAL_KINDS
