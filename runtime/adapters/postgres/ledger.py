"""PostgresLedger: the Ledger seam on PostgreSQL (psycopg 3 async, one pool).

This module holds admission, claim, settlement, recovery and queries; the
durable waits (checkpoints, consent, delegation, hardware, cancellation) come
from `waits.WaitsMixin`. It has the observable semantics of `runtime.adapters.memory.MemoryLedger`,
which is the reference: the same results for the same calls, including the
idempotent repeats (a claim repeated with its own token, an identical
settlement, a repeated orphan failure). Each method is exactly one
transaction; writes lock their rows (`queries` describes the discipline) and
are conditional on the state they were decided from, which is how seed
000_81a5c720b14d934a.txt ("Admission and exact claim") gets its exact claim
and sequence-fenced settlement across processes.

A lost connection, a pool timeout or a serialization failure surfaces as
`LedgerUnavailable`: the transaction may or may not have committed, and the
caller's bounded retry repeats it safely. Differences from the memory ledger
are limited to inputs a Clock-driven caller never produces: naive timestamps
and negative limits are refused, and JSON values must be JSON-native (JSONB
keeps numbers as decimals, so a float that Python writes in exponent form,
about 1e16 and beyond, comes back as the int of that decimal).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg.types.json import Jsonb

from runtime.adapters import open_run, settle_rule
from runtime.adapters.postgres import queries as q
from runtime.adapters.postgres import wait_queries as wq
from runtime.adapters.postgres.boots import BootsMixin
from runtime.adapters.postgres.connect import DEFAULT_CONNECT_TIMEOUT_S, open_pool, probe
from runtime.adapters.postgres.migrate import require_current
from runtime.adapters.postgres.rows import (
    DELIVERY_COLUMNS,
    aware,
    checkpoint_from_row,
    consent_from_row,
    delivery_from_row,
    delivery_params,
    job_from_row,
    run_from_row,
    run_params,
    step_from_row,
)
from runtime.adapters.postgres.tx import (
    Cursor,
    LockDisciplineBroken,
    fetch_delivery,
    fetch_run,
    key,
    one,
)
from runtime.adapters.postgres.waits import WaitsMixin
from runtime.events.model import TERMINAL_KINDS
from runtime.models import (
    Admission,
    Claim,
    DeliveryState,
    LedgerDump,
    Run,
    RunDelivery,
    RunStatus,
    Settlement,
    Step,
)
from runtime.seams import Ledger


class PostgresLedger(WaitsMixin, BootsMixin):
    """The production ledger. Build it with `await PostgresLedger.connect(dsn)`."""

    @classmethod
    async def connect(
        cls,
        dsn: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        acquire_timeout_s: float = 10.0,
        check_schema: bool = True,
    ) -> PostgresLedger:
        """Connect within `timeout_s` or raise one clear error, leaving nothing open.

        With `check_schema` the database must already be at this code's newest
        migration (`SchemaTooOld` / `SchemaTooNew` otherwise).
        """
        conn = await probe(dsn, timeout_s)
        async with conn:
            if check_schema:
                await require_current(conn)
        pool = await open_pool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            timeout_s=timeout_s,
            acquire_timeout_s=acquire_timeout_s,
        )
        return cls(pool)

    # -- admission ----------------------------------------------------------

    async def admit_run(
        self, run: Run, delivery: RunDelivery, *, fence_session: bool = True
    ) -> Admission:
        if not (fence_session and run.session is not None):
            # No fence to hold: one autocommit statement (issue 17, client CPU).
            async with self._statement() as cur:
                return await _admit_pair(cur, run, delivery)
        async with self._transaction() as cur:
            busy = await _session_busy(cur, run)
            if isinstance(busy, Admission):
                return busy  # the id is admitted already: its stored pair
            if busy is not None:
                if delivery.run_id != run.id or delivery.seq != run.seq:
                    raise ValueError("delivery must be the Run's current generation")
                return Admission(run=run, delivery=delivery, created=False, busy=busy)
            return await _admit_pair(cur, run, delivery)

    async def get_run(self, run_id: UUID) -> Run | None:
        async with self._transaction() as cur:
            return await fetch_run(cur, q.GET_RUN, run_id)

    async def get_delivery(self, run_id: UUID, seq: int) -> RunDelivery | None:
        async with self._transaction() as cur:
            return await fetch_delivery(cur, q.GET_DELIVERY, run_id, seq)

    async def deliveries(self, run_id: UUID) -> list[RunDelivery]:
        async with self._transaction() as cur:
            await cur.execute(q.DELIVERIES_OF, {"run_id": run_id})
            return [delivery_from_row(r) for r in await cur.fetchall()]

    async def release_held(self, run_id: UUID, seq: int, now: datetime) -> RunDelivery | None:
        async with self._transaction() as cur:
            d = await fetch_delivery(cur, q.LOCK_DELIVERY, run_id, seq)
            if d is None or d.state is not DeliveryState.HELD:
                return d
            await cur.execute(q.RELEASE_HELD, key(run_id, seq, now))
            return delivery_from_row(await one(cur))

    async def fail_held(
        self, run_id: UUID, seq: int, reason: str, now: datetime
    ) -> RunDelivery | None:
        async with self._transaction() as cur:
            run = await fetch_run(cur, q.LOCK_RUN, run_id)
            d = await fetch_delivery(cur, q.LOCK_DELIVERY, run_id, seq)
            if run is None or d is None or d.state is not DeliveryState.HELD:
                return d
            if run.status is RunStatus.QUEUED and run.seq == seq:
                await cur.execute(q.FAIL_QUEUED_RUN, {**key(run_id, seq, now), "reason": reason})
                await one(cur)
            await cur.execute(q.FAIL_HELD_DELIVERY, key(run_id, seq, now))
            return delivery_from_row(await one(cur))

    async def mark_published(self, run_id: UUID, seq: int, now: datetime) -> RunDelivery | None:
        # One statement (PUBLISH_PAIR): PUBLISHED only while the Run is QUEUED at `seq`;
        # otherwise the delivery as it stands (the acknowledgement lost to a
        # cancellation leaves it PENDING), or None without the Run.
        async with self._statement() as cur:
            await cur.execute(q.PUBLISH_PAIR, key(run_id, seq, now))
            row = await cur.fetchone()
            return None if row is None else delivery_from_row(row)

    # -- claim and settlement -----------------------------------------------

    async def claim_delivery(
        self, run_id: UUID, seq: int, boot_id: str, token: str, now: datetime
    ) -> Claim:
        # One statement (CLAIM_ONE): the claim's checks are its condition on the
        # locked pair; the answer tells a claim now from our own earlier claim
        # (same token) and from a refusal (issue 17, client CPU).
        async with self._statement() as cur:
            await cur.execute(
                q.CLAIM_ONE,
                {
                    **key(run_id, seq, now),
                    "boot_id": boot_id,
                    "token": token,
                    "claimable": q.CLAIMABLE,
                },
            )
            row = await cur.fetchone()
        if row is None:
            return Claim(claimed=False, run=None, delivery=None)  # no Run
        run, d = _pair_from_row(row)
        if row["claimed_now"]:
            return Claim(claimed=True, run=run, delivery=d)
        if d is not None and d.state is DeliveryState.CLAIMED and d.claim_token == token:
            return Claim(claimed=True, run=run, delivery=d)  # our own earlier claim
        return Claim(claimed=False, run=run, delivery=d)

    async def settle_run(
        self,
        run_id: UUID,
        seq: int,
        settlement: Settlement,
        now: datetime,
        step: tuple[str, dict[str, Any]] | None = None,
        before: Sequence[tuple[str, dict[str, Any]]] = (),
    ) -> Run | None:
        steps = settle_rule.check_steps(step, before)
        async with self._transaction() as cur:
            # With Steps, the Run's Step lock too, after the rows (the discipline's order).
            run, d = await _lock_pair(cur, run_id, seq, step_lock=bool(steps))
            verdict = settle_rule.decide(run, d, seq, settlement)
            if verdict is settle_rule.Verdict.FENCED:
                return None
            if verdict is settle_rule.Verdict.REPEATED:
                # the same settlement, repeated after an ambiguous commit
                if steps and await _settlement_steps(cur, run_id, seq, steps, now):
                    await cur.execute(q.MARK_TERMINAL_STEP, {"run_id": run_id})
                return run
            params = {
                **key(run_id, seq, now),
                "settleable": q.SETTLEABLE,
                "status": settlement.status.value,
                "result": None if settlement.result is None else Jsonb(settlement.result),
                "error": settlement.error,
            }
            if steps:
                await cur.execute(q.SETTLE_STEPS_PAIR, {**params, **_steps_params(steps)})
            else:
                await cur.execute(q.SETTLE_PAIR, params)
            row = await one(cur)
            if row["delivery_settled"] != 1:
                raise LockDisciplineBroken("the claimed delivery under its lock was not settled")
            return run_from_row(row)

    # -- recovery -----------------------------------------------------------

    async def rotate_delivery(self, run_id: UUID, seq: int, now: datetime) -> RunDelivery | None:
        async with self._transaction() as cur:
            run = await fetch_run(cur, q.LOCK_RUN, run_id)
            d = await fetch_delivery(cur, q.LOCK_DELIVERY, run_id, seq)
            if (
                run is None
                or d is None
                or run.status is not RunStatus.QUEUED
                or run.seq != seq
                or d.state not in (DeliveryState.PENDING, DeliveryState.PUBLISHED)
            ):
                return None
            await cur.execute(
                q.CLOSE_DEAD_DELIVERY, {**key(run_id, seq, now), "claimable": q.CLAIMABLE}
            )
            await one(cur)
            fresh = d.next_generation(now)
            await cur.execute(q.INSERT_DELIVERY, delivery_params(fresh))
            stored = delivery_from_row(await one(cur))
            await cur.execute(q.ADVANCE_RUN_SEQ, key(run_id, seq, now))
            await one(cur)
            return stored

    async def fail_orphan(
        self, run_id: UUID, seq: int, boot_id: str, reason: str, now: datetime
    ) -> Run | None:
        return await self._fail_open(run_id, seq, reason, now, open_run.OrphanFence(boot_id))

    async def fail_abandoned(
        self, run_id: UUID, seq: int, claim_token: str, reason: str, now: datetime
    ) -> Run | None:
        fence = open_run.AbandonedFence(claim_token)
        return await self._fail_open(run_id, seq, reason, now, fence)

    async def _fail_open(
        self, run_id: UUID, seq: int, reason: str, now: datetime,
        fence: open_run.OrphanFence | open_run.AbandonedFence,
    ) -> Run | None:
        """Under the Run's and the delivery's row locks, `open_run.decide`; on FAIL the
        Run and then the delivery are written FAILED, the delivery by the statement that
        repeats `fence` as its condition (its fields are the statement's parameters)."""
        async with self._transaction() as cur:
            run = await fetch_run(cur, q.LOCK_RUN, run_id)
            d = await fetch_delivery(cur, q.LOCK_DELIVERY, run_id, seq)
            verdict = open_run.decide(run, d, seq, reason, fence)
            if verdict is not open_run.Verdict.FAIL:
                return run if verdict is open_run.Verdict.REPEATED else None
            params = {**key(run_id, seq, now), "reason": reason, "orphanable": q.ORPHANABLE,
                      **asdict(fence)}
            await cur.execute(q.FAIL_ORPHAN_RUN, params)
            failed = run_from_row(await one(cur))
            await cur.execute(_FAIL_DELIVERY[type(fence)], params)
            await one(cur)
            return failed

    # -- queries ------------------------------------------------------------

    async def runs_in_session(self, session: str, limit: int) -> list[Run]:
        async with self._transaction() as cur:
            await cur.execute(
                q.RUNS_IN_SESSION,
                {"session": session, "terminal": q.TERMINAL, "limit": _limit(limit)},
            )
            return [run_from_row(r) for r in await cur.fetchall()]

    async def page_runs(
        self,
        statuses: Sequence[RunStatus],
        after: tuple[datetime, UUID] | None,
        limit: int,
    ) -> list[Run]:
        params: dict[str, Any] = {
            "statuses": sorted({RunStatus(s).value for s in statuses}),
            "limit": _limit(limit),
        }
        query = q.PAGE_RUNS_FIRST
        if after is not None:
            query = q.PAGE_RUNS_AFTER
            params["after_at"], params["after_id"] = aware(after[0]), after[1]
        async with self._transaction() as cur:
            await cur.execute(query, params)
            return [run_from_row(r) for r in await cur.fetchall()]

    async def append_step(
        self, run_id: UUID, seq: int, kind: str, data: dict[str, Any], now: datetime
    ) -> Step:
        async with self._transaction() as cur:
            await _lock_steps_of(cur, run_id)
            terminal = kind in TERMINAL_KINDS
            if terminal and (written := await _terminal_step(cur, run_id)) is not None:
                return written  # a second terminal Step is refused: the first stands
            await cur.execute(
                q.APPEND_STEP,
                {
                    "run_id": run_id,
                    "seq": seq,
                    "kind": kind,
                    "data": Jsonb(data),
                    "now": aware(now),
                    "terminal": q.TERMINAL_STEP_KINDS,
                },
            )
            row = await cur.fetchone()
            if row is None:  # the terminal Step closed the log: this one is refused
                closed = await _terminal_step(cur, run_id)
                assert closed is not None
                return closed
            step = step_from_row(row)
            if terminal:
                await cur.execute(q.MARK_TERMINAL_STEP, {"run_id": run_id})
            return step

    async def evidence_debts(self, after: tuple[datetime, UUID] | None, limit: int) -> list[Run]:
        return await self._debt_page(q.EVIDENCE_DEBTS, after, limit)

    async def late_fence_debts(
        self, after: tuple[datetime, UUID] | None, limit: int
    ) -> list[Run]:
        return await self._debt_page(q.LATE_FENCE_DEBTS, after, limit)

    async def settle_late_fence(self, run_id: UUID) -> bool:
        async with self._transaction() as cur:
            await cur.execute(q.SETTLE_LATE_FENCE, {"run_id": run_id})
            return await cur.fetchone() is not None

    async def _debt_page(
        self, query: Any, after: tuple[datetime, UUID] | None, limit: int
    ) -> list[Run]:
        params: dict[str, Any] = {"after_at": None, "after_id": None, "limit": _limit(limit)}
        if after is not None:
            params["after_at"], params["after_id"] = aware(after[0]), after[1]
        async with self._transaction() as cur:
            await cur.execute(query, params)
            return [run_from_row(r) for r in await cur.fetchall()]

    async def append_steps(
        self, run_id: UUID, seq: int, items: Sequence[tuple[str, dict[str, Any]]], now: datetime
    ) -> list[Step]:
        if not items:
            return []
        async with self._transaction() as cur:
            await _lock_steps_of(cur, run_id)
            terminal = any(kind in TERMINAL_KINDS for kind, _ in items)
            if terminal:
                items = _one_terminal(items, await _terminal_step(cur, run_id) is not None)
                if not items:
                    return []
            await cur.execute(
                q.APPEND_STEPS,
                {
                    "run_id": run_id,
                    "seq": seq,
                    "kinds": [kind for kind, _ in items],
                    "datas": [Jsonb(data) for _, data in items],
                    "now": aware(now),
                    "terminal": q.TERMINAL_STEP_KINDS,
                },
            )
            rows = await cur.fetchall()
            if terminal:
                await cur.execute(q.MARK_TERMINAL_STEP, {"run_id": run_id})
        return sorted((step_from_row(r) for r in rows), key=lambda s: s.index)

    async def steps(self, run_id: UUID) -> list[Step]:
        async with self._transaction() as cur:
            await cur.execute(q.STEPS_OF, {"run_id": run_id})
            return [step_from_row(r) for r in await cur.fetchall()]

    async def dump(self) -> LedgerDump:
        """Everything in one REPEATABLE READ snapshot, in the memory ledger's order."""
        async with self._transaction(snapshot=True) as cur:

            async def rows(query: Any) -> list[Any]:
                await cur.execute(query)
                return await cur.fetchall()

            return LedgerDump(
                runs=[run_from_row(r) for r in await rows(q.DUMP_RUNS)],
                deliveries=[delivery_from_row(r) for r in await rows(q.DUMP_DELIVERIES)],
                steps=[step_from_row(r) for r in await rows(q.DUMP_STEPS)],
                consents=[consent_from_row(r) for r in await rows(wq.DUMP_CONSENTS)],
                agent_jobs=[job_from_row(r) for r in await rows(wq.DUMP_AGENT_JOBS)],
                checkpoints=[checkpoint_from_row(r) for r in await rows(wq.DUMP_CHECKPOINTS)],
            )


# -- helpers ------------------------------------------------------------------

_FAIL_DELIVERY: dict[type, Any] = {
    open_run.OrphanFence: q.FAIL_ORPHAN_DELIVERY,
    open_run.AbandonedFence: q.FAIL_ABANDONED_DELIVERY,
}
"""The delivery's FAILED update for each fence, conditional on what the fence checked."""


async def _lock_steps_of(cur: Cursor, run_id: UUID) -> None:
    """Take the Run's Step lock; LookupError when no such Run was admitted."""
    await cur.execute(q.LOCK_STEPS_OF_RUN, {"ns": q.STEP_LOCK_NAMESPACE, "run_id": run_id})
    if await cur.fetchone() is None:
        raise LookupError(f"no Run {run_id}: a Step names an admitted Run")


async def _settlement_steps(
    cur: Cursor, run_id: UUID, seq: int, steps: Sequence[tuple[str, dict[str, Any]]],
    now: datetime,
) -> bool:
    """A repeated settlement's Steps (lifecycle ones, then the terminal one), in its
    transaction, under the Run's Step lock (LOCK_PAIR_AND_STEPS took it), by one
    statement. True when written; False when the Run has a terminal Step already
    (APPEND_STEPS then inserts nothing: all or none)."""
    await cur.execute(
        q.APPEND_STEPS, {"run_id": run_id, "seq": seq, "now": aware(now), **_steps_params(steps)}
    )
    return bool(await cur.fetchall())


def _steps_params(steps: Sequence[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    return {"kinds": [kind for kind, _ in steps], "datas": [Jsonb(data) for _, data in steps],
            "terminal": q.TERMINAL_STEP_KINDS}


async def _lock_pair(
    cur: Cursor, run_id: UUID, seq: int, *, step_lock: bool = False
) -> tuple[Run | None, RunDelivery | None]:
    """The Run and its delivery `seq`, both row-locked (Run first) by one statement;
    with `step_lock`, then the Run's Step lock as well."""
    params: dict[str, Any] = {"run_id": run_id, "seq": seq}
    if step_lock:
        params["ns"] = q.STEP_LOCK_NAMESPACE
    await cur.execute(q.LOCK_PAIR_AND_STEPS if step_lock else q.LOCK_PAIR, params)
    row = await cur.fetchone()
    if row is None:
        return None, None  # no Run, so no delivery (its foreign key)
    return _pair_from_row(row)


def _pair_from_row(row: Any) -> tuple[Run, RunDelivery | None]:
    """A Run's columns and its delivery's, prefixed (NULL when there is none)."""
    prefix = q.DELIVERY_PREFIX
    if row[prefix + "run_id"] is None:
        return run_from_row(row), None
    return run_from_row(row), delivery_from_row({c: row[prefix + c] for c in DELIVERY_COLUMNS})


async def _admit_pair(cur: Cursor, run: Run, delivery: RunDelivery) -> Admission:
    """The Run and its delivery by ADMIT_PAIR, or the stored pair when the id is
    admitted already (read after the insert found it; a delivery that is not the
    Run's current generation is refused unless the id is admitted already, which
    answers first, as the memory ledger does)."""
    if delivery.run_id != run.id or delivery.seq != run.seq:
        existing = await _maybe_existing(cur, run.id)
        if existing is None:
            raise ValueError("delivery must be the Run's current generation")
        return existing
    prefix = q.DELIVERY_PREFIX
    await cur.execute(
        q.ADMIT_PAIR,
        {**run_params(run), **{prefix + k: v for k, v in delivery_params(delivery).items()}},
    )
    row = await cur.fetchone()
    if row is None:
        return await _existing_admission(cur, run.id)
    return Admission(run=run, delivery=delivery_from_row(row), created=True)


async def _terminal_step(cur: Cursor, run_id: UUID) -> Step | None:
    """The Run's terminal Step, read under the Run's Step lock."""
    await cur.execute(q.TERMINAL_STEP_OF, {"run_id": run_id, "terminal": q.TERMINAL_STEP_KINDS})
    row = await cur.fetchone()
    return None if row is None else step_from_row(row)


def _one_terminal(
    items: Sequence[tuple[str, dict[str, Any]]], written: bool
) -> list[tuple[str, dict[str, Any]]]:
    """The group up to and including its first terminal item, or nothing when a
    terminal Step is `written` already: a terminal Step closes the Run's log."""
    if written:
        return []
    kept: list[tuple[str, dict[str, Any]]] = []
    for kind, data in items:
        kept.append((kind, data))
        if kind in TERMINAL_KINDS:
            break
    return kept


def _limit(limit: int) -> int:
    if limit < 0:
        raise ValueError(f"limit must not be negative, got {limit}")
    return limit


async def _session_busy(cur: Cursor, run: Run) -> Admission | Run | None:
    """Under the session's advisory lock (held to commit, so admissions of one
    session serialise across every pool): the stored pair when `run.id` is
    admitted already, else the session's first other nonterminal Run, else
    None. A later admission's read starts after the holder committed, so it
    sees the Run the holder inserted (READ COMMITTED, set first whatever the
    server's default, takes a snapshot per statement)."""
    await cur.execute(q.READ_COMMITTED)
    await cur.execute(q.LOCK_SESSION, {"ns": q.SESSION_LOCK_NAMESPACE, "session": run.session})
    existing = await _maybe_existing(cur, run.id)
    if existing is not None:
        return existing
    await cur.execute(
        q.SESSION_BUSY, {"session": run.session, "id": run.id, "terminal": q.TERMINAL}
    )
    row = await cur.fetchone()
    return None if row is None else run_from_row(row)


async def _maybe_existing(cur: Cursor, run_id: UUID) -> Admission | None:
    await cur.execute(q.CURRENT_PAIR, {"id": run_id})
    row = await cur.fetchone()
    if row is None:
        return None
    prefix = q.DELIVERY_PREFIX
    delivery = delivery_from_row({c: row[prefix + c] for c in DELIVERY_COLUMNS})
    return Admission(run=run_from_row(row), delivery=delivery, created=False)


async def _existing_admission(cur: Cursor, run_id: UUID) -> Admission:
    found = await _maybe_existing(cur, run_id)
    if found is None:
        raise LockDisciplineBroken(f"Run {run_id} exists without its current delivery")
    return found


def _conforms(ledger: PostgresLedger) -> Ledger:
    """Static proof, checked by mypy, that PostgresLedger has every Ledger method."""
    return ledger
