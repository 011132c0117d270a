"""What the hot path costs PostgreSQL, asserted where it can regress silently (issue 17).

Row-level evidence, immune to other sessions on the cluster: a row lock or a
write stamps the row with the transaction's id (`xmin` for a new row version,
`xmax` for a lock), so a path that must not lock leaves `xmax` at 0, and a
group commit leaves one `xmin` on every row it wrote.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

from runtime.adapters.postgres import PostgresLedger
from runtime.models import RunStatus, Settlement
from tests.contract.ledger_impls import postgres_ledger
from tests.contract.ledger_records import at, make_delivery, make_run, uid

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # psycopg's AsyncConnection does not run under trio


@pytest.fixture
async def pg(pg_fresh_dsn: str) -> AsyncIterator[tuple[PostgresLedger, str]]:
    async with postgres_ledger(pg_fresh_dsn) as ledger:
        yield ledger, pg_fresh_dsn


async def column(dsn: str, query: str, *params: object) -> list[str]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(query, params)
        return [str(row[0]) for row in await cur.fetchall()]


async def test_deleting_the_checkpoint_a_run_never_had_locks_nothing(
    pg: tuple[PostgresLedger, str],
) -> None:
    ledger, dsn = pg
    run = make_run(uid(1))
    await ledger.admit_run(run, make_delivery(run))
    await ledger.claim_delivery(run.id, 0, "boot", "tok", at(1))
    await ledger.settle_run(run.id, 0, Settlement(status=RunStatus.DONE), at(2))
    # xmax now holds the settlement's id (its lock stamped the version it wrote)
    locked_before = await column(dsn, "SELECT xmax FROM run WHERE id = %s", run.id)
    assert await ledger.delete_checkpoint(run.id) is True
    assert await column(dsn, "SELECT xmax FROM run WHERE id = %s", run.id) == locked_before


async def test_a_group_of_steps_is_one_transaction(pg: tuple[PostgresLedger, str]) -> None:
    ledger, dsn = pg
    items = [(f"k{i}", {"i": i}) for i in range(5)]
    run = make_run(uid(1))
    await ledger.admit_run(run, make_delivery(run))
    await ledger.append_steps(uid(1), 0, items, at(1))
    await ledger.append_step(uid(1), 0, "single", {}, at(2))
    xmins = await column(dsn, "SELECT xmin FROM run_step WHERE run_id = %s ORDER BY idx", uid(1))
    assert len(set(xmins[:5])) == 1 and xmins[5] != xmins[0]


ECHO_ROUND_TRIPS = 7
"""Statements an `echo` Run's ledger calls send, BEGIN and COMMIT included: admission
1, mark_published 1 and the claim 1 (one autocommit statement each), settlement with
its Steps 4 (issue 17: each costs about 0.1 ms of client CPU; it was 23 before the
pairs, 10 before the claim's one statement)."""


async def test_an_echo_runs_ledger_calls_take_seven_round_trips(
    pg: tuple[PostgresLedger, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from psycopg import AsyncCursor
    from psycopg._connection_base import BaseConnection

    sent: list[str] = []
    execute, command = AsyncCursor.execute, BaseConnection._exec_command

    async def counted_execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append("statement")
        return await execute(self, query, *args, **kwargs)

    def counted_command(self: Any, cmd: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(bytes(cmd).decode() if isinstance(cmd, bytes) else str(cmd))
        return command(self, cmd, *args, **kwargs)

    ledger, _ = pg
    run = make_run(uid(1))
    monkeypatch.setattr(AsyncCursor, "execute", counted_execute)
    monkeypatch.setattr(BaseConnection, "_exec_command", counted_command)
    admitted = await ledger.admit_run(run, make_delivery(run), fence_session=False)
    marked = await ledger.mark_published(run.id, 0, at(1))
    claim = await ledger.claim_delivery(run.id, 0, "boot", "tok", at(2))
    settled = await ledger.settle_run(
        run.id, 0, Settlement(status=RunStatus.DONE, result={"echo": "hi"}), at(3),
        step=("run.done", {"error": None}), before=[("run.claimed", {"seq": 0})],
    )
    monkeypatch.undo()
    assert admitted.created and marked is not None and claim.claimed
    assert settled is not None and settled.status is RunStatus.DONE
    assert [s.kind for s in await ledger.steps(run.id)] == ["run.claimed", "run.done"]
    assert len(sent) == ECHO_ROUND_TRIPS, sent
