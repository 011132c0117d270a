"""Admission and cancellation decided by the ledger, not by one process
(issue 15, M11 item 1; seed 000_81a5c720b14d934a.txt, "Admission and exact
claim" and "Cancellation, mutation, and recovery").

Each Vessel serialises same-key admissions, fences a Bridge session and elects
a cancellation writer inside its own process. Two Vessels on one database do
not share those elections, so the rules must hold in the ledger itself. Every
test here races two engines (or two cancellers) with separate process-local
state: on the memory adapter both share one ledger, on PostgreSQL each has its
own pool on one database, as two `vessel serve` have.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any

import anyio
import psycopg
import pytest
from psycopg import sql

from runtime.adapters.memory import MemoryBroker, MemoryEffectSink, MemoryLedger
from runtime.cancel import Canceller
from runtime.engine import RunEngine, Submission
from runtime.errors import IdempotencyConflict, SessionBusy
from runtime.events.model import TERMINAL_KINDS
from runtime.models import DeliveryState, Intent, RunStatus
from runtime.patterns import default_registry
from runtime.seams import Deps, Ledger
from tests.contract.ledger_impls import LEDGER_KINDS, TRIO_SKIP, postgres_ledger
from tests.unit.fakes import EPOCH, FakeClock, FakeEntropy, ScriptedFaults

pytestmark = pytest.mark.anyio

ROUNDS = 6


@dataclass
class Vessel:
    """One Vessel's process-local state over a ledger both Vessels share."""

    deps: Deps
    engine: RunEngine
    canceller: Canceller


def vessel(ledger: Ledger, broker: MemoryBroker, n: int) -> Vessel:
    clock = FakeClock(EPOCH + timedelta(milliseconds=n))  # two processes read two clocks
    deps = Deps(
        clock=clock, entropy=FakeEntropy(n), ledger=ledger, broker=broker,
        faults=ScriptedFaults(), effects=MemoryEffectSink(), boot_id=f"boot-{n}",
    )
    return Vessel(deps, RunEngine(deps, default_registry()), Canceller(deps))


@pytest.fixture(params=LEDGER_KINDS)
async def vessels(
    request: pytest.FixtureRequest, anyio_backend: str
) -> AsyncIterator[tuple[Vessel, Vessel]]:
    broker = MemoryBroker(FakeClock())
    if request.param == "memory":
        shared = MemoryLedger()
        yield vessel(shared, broker, 1), vessel(shared, broker, 2)
        return
    if anyio_backend != "asyncio":
        pytest.skip(TRIO_SKIP)
    dsn = request.getfixturevalue("pg_fresh_dsn")
    async with postgres_ledger(dsn, max_size=4) as one, postgres_ledger(dsn, max_size=4) as two:
        yield vessel(one, broker, 1), vessel(two, broker, 2)


async def race(*calls: Callable[[], Awaitable[Any]]) -> list[Any]:
    """Run `calls` concurrently; each result, or the exception it raised."""
    out: list[Any] = [None] * len(calls)

    async def one(i: int, call: Callable[[], Awaitable[Any]]) -> None:
        try:
            out[i] = await call()
        except (SessionBusy, IdempotencyConflict) as exc:
            out[i] = exc

    async with anyio.create_task_group() as tg:
        for i, call in enumerate(calls):
            tg.start_soon(one, i, call)
    return out


def intent(key: str, prompt: str = "hello", session: str | None = None) -> Intent:
    return Intent(pattern="echo", prompt=prompt, idempotency_key=key, session=session)


async def test_one_key_raced_by_two_vessels_admits_one_run(
    vessels: tuple[Vessel, Vessel],
) -> None:
    a, b = vessels
    for r in range(ROUNDS):
        same = intent(f"same-{r}")
        got: list[Submission] = await race(
            partial(a.engine.submit, same), partial(b.engine.submit, same),
            partial(a.engine.submit, same), partial(b.engine.submit, same),
        )
        assert len({s.run.id for s in got}) == 1
        assert sum(s.created for s in got) == 1, [s.created for s in got]
        replay = await b.engine.submit(same)
        assert replay.run.id == got[0].run.id and not replay.created
    runs = (await a.deps.ledger.dump()).runs
    assert len(runs) == ROUNDS


async def test_one_key_with_two_contents_admits_one_and_refuses_the_other(
    vessels: tuple[Vessel, Vessel],
) -> None:
    a, b = vessels
    for r in range(ROUNDS):
        key = f"conflict-{r}"
        got = await race(partial(a.engine.submit, intent(key, "one")),
                         partial(b.engine.submit, intent(key, "two")))
        won = [s for s in got if isinstance(s, Submission)]
        refused = [e for e in got if isinstance(e, IdempotencyConflict)]
        assert len(won) == 1 and len(refused) == 1, got
        assert refused[0].key == key
        again = await a.engine.submit(intent(key, won[0].run.intent.prompt or ""))
        assert again.run.id == won[0].run.id and not again.created
    assert len((await a.deps.ledger.dump()).runs) == ROUNDS


async def test_two_keys_in_one_session_raced_by_two_vessels_admit_one_nonterminal_run(
    vessels: tuple[Vessel, Vessel],
) -> None:
    await session_rounds(*vessels)


@pytest.mark.postgres
async def test_the_session_fence_holds_where_the_server_defaults_to_repeatable_read(
    pg_fresh_dsn: str, anyio_backend: str
) -> None:
    """A server configured for REPEATABLE READ must not give the fenced admission a
    snapshot taken before it waited for the session's lock."""
    if anyio_backend != "asyncio":
        pytest.skip(TRIO_SKIP)
    with psycopg.connect(pg_fresh_dsn, autocommit=True) as conn:
        name = conn.execute("SELECT current_database()").fetchone()
        assert name is not None
        conn.execute(sql.SQL("ALTER DATABASE {} SET default_transaction_isolation "
                             "= 'repeatable read'").format(sql.Identifier(name[0])))
    broker = MemoryBroker(FakeClock())
    async with postgres_ledger(pg_fresh_dsn, max_size=4) as one, \
            postgres_ledger(pg_fresh_dsn, max_size=4) as two:
        await session_rounds(vessel(one, broker, 1), vessel(two, broker, 2))


async def session_rounds(a: Vessel, b: Vessel) -> None:
    for r in range(ROUNDS):
        session = f"chat-{r}"
        got = await race(
            partial(a.engine.submit, intent(f"{session}-a", session=session)),
            partial(b.engine.submit, intent(f"{session}-b", session=session)),
            partial(a.engine.submit, intent(f"{session}-c", session=session)),
            partial(b.engine.submit, intent(f"{session}-d", session=session)),
        )
        won = [s for s in got if isinstance(s, Submission)]
        refused = [e for e in got if isinstance(e, SessionBusy)]
        assert len(won) == 1 and len(refused) == 3, got
        assert {e.run_id for e in refused} == {won[0].run.id}
        open_runs = await a.deps.ledger.runs_in_session(session, 10)
        assert [run.id for run in open_runs] == [won[0].run.id]
    runs = (await a.deps.ledger.dump()).runs
    assert len(runs) == ROUNDS  # a refused admission wrote nothing


async def test_two_vessels_cancelling_one_run_cancel_it_once(
    vessels: tuple[Vessel, Vessel],
) -> None:
    a, b = vessels
    ledger = a.deps.ledger
    for r in range(ROUNDS):
        run = (await a.engine.submit(intent(f"cancel-{r}"))).run
        first, second = await race(partial(a.canceller.cancel, run.id),
                                   partial(b.canceller.cancel, run.id))
        assert first.status is second.status is RunStatus.CANCELLED
        assert first == second  # one transition: both read the one that committed
        steps = await ledger.steps(run.id)
        assert [s.kind for s in steps if s.kind in TERMINAL_KINDS] == ["run.cancelled"]
        delivery = await ledger.get_delivery(run.id, 0)
        assert delivery is not None and delivery.state is DeliveryState.FAILED
    debts = await ledger.late_fence_debts(None, 100)
    assert len(debts) == ROUNDS == len({d.id for d in debts})  # each owed once
