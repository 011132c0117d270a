"""Differential test: the PostgreSQL ledger against the memory ledger (DESIGN section 2).

A Hypothesis state machine applies one random sequence of ledger operations
to a MemoryLedger and to a PostgresLedger on an emptied database, and
requires every result (or the type of every error) and the final `dump()` to
be equal. Run ids, sequences, boots, tokens and reasons come from small pools
so operations collide on the same records; the clock advances by whole
seconds or not at all, so equal timestamps (the id tie-break of paging) occur.

Each machine instance owns one asyncio event loop (`asyncio.Runner`): the
machine is synchronous and psycopg runs on asyncio only. Examples: 200 when
`CI` is set (profile `ledger-differential-ci`), fewer locally.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar
from uuid import UUID

import psycopg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule, run_state_machine_as_test

from runtime.adapters.memory import MemoryLedger
from runtime.adapters.postgres import PostgresLedger, migrate
from runtime.models import (
    DeliveryState,
    Intent,
    ResumeMode,
    Run,
    RunDelivery,
    RunStatus,
    Settlement,
)
from runtime.seams import Ledger
from tests.contract.ledger_records import T0, uid

pytestmark = pytest.mark.postgres

T = TypeVar("T")

_COMMON = {
    "deadline": None,
    "stateful_step_count": 40,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
    "print_blob": True,
}
settings.register_profile("ledger-differential-ci", max_examples=200, **_COMMON)
settings.register_profile("ledger-differential-dev", max_examples=40, **_COMMON)
PROFILE = "ledger-differential-ci" if os.environ.get("CI") else "ledger-differential-dev"

RUN_IDS = st.sampled_from([uid(n) for n in range(1, 4)])
SEQS = st.sampled_from([0, 0, 0, 1, 1, 2])  # most Runs stay at their first hops
BOOTS = st.sampled_from(["boot-a", "boot-b"])
TOKENS = st.sampled_from(["tok-1", "tok-2", "tok-3"])
REASONS = st.sampled_from(["stasis lost", "retention failed", "orphaned"])
SESSIONS = st.sampled_from([None, "s1", "s2"])
LIMITS = st.integers(min_value=0, max_value=5)

TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    max_size=6,
)
# JSONB keeps numbers as decimals: finite floats of moderate size round-trip exactly.
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(min_value=-1e12, max_value=1e12, allow_nan=False)
    | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=6,
)
DOCUMENTS = st.dictionaries(TEXT, JSON, max_size=3)
SETTLEMENTS = st.one_of(
    st.builds(lambda r: Settlement(status=RunStatus.DONE, result=r), DOCUMENTS),
    st.builds(
        lambda e: Settlement(status=RunStatus.FAILED, error=e),
        st.sampled_from(["boom", "pinned Pattern unavailable"]),
    ),
    st.just(Settlement(status=RunStatus.CANCELLED, error="cancelled")),
)
# Mostly fresh QUEUED admissions; sometimes a Run already on a later, resumed hop, or a
# live Run of an older boot (for orphans), or an invalid delivery (refused).
ADMIT_SHAPES = st.sampled_from(
    ["queued", "queued", "queued", "resumed", "running", "hardware", "mismatch"]
)


class LedgerDifferential(RuleBasedStateMachine):
    def __init__(self, dsn: str) -> None:
        super().__init__()
        self.loop = asyncio.Runner()
        self.memory = MemoryLedger()
        self.now = T0
        try:
            _empty(dsn)
            self.postgres = self.loop.run(PostgresLedger.connect(dsn, min_size=1, max_size=2))
        except BaseException:
            self.loop.close()
            raise

    def teardown(self) -> None:
        try:
            memory, postgres = self._both_raw(lambda ledger: ledger.dump())
            assert postgres == memory, "final dump differs"
        finally:
            try:
                self.loop.run(self.postgres.close())
            finally:
                self.loop.close()

    # -- running one operation on both ledgers ---------------------------------

    def _outcome(self, ledger: Ledger, call: Callable[[Ledger], Awaitable[Any]]) -> Any:
        async def attempt() -> Any:
            try:
                return ("ok", await call(ledger))
            except (ValueError, LookupError) as exc:
                return ("raised", type(exc).__name__)

        return self.loop.run(attempt())

    def _both_raw(self, call: Callable[[Ledger], Awaitable[T]]) -> tuple[T, T]:
        return self.loop.run(call(self.memory)), self.loop.run(call(self.postgres))

    def both(self, call: Callable[[Ledger], Awaitable[Any]]) -> Any:
        expected = self._outcome(self.memory, call)
        actual = self._outcome(self.postgres, call)
        assert actual == expected, f"postgres {actual!r} != memory {expected!r}"
        return expected

    # -- rules -------------------------------------------------------------------

    @rule(seconds=st.integers(min_value=1, max_value=3))
    def tick(self, seconds: int) -> None:
        self.now += timedelta(seconds=seconds)

    @rule(
        run_id=RUN_IDS,
        shape=ADMIT_SHAPES,
        held=st.booleans(),
        session=SESSIONS,
        mode=st.sampled_from(list(ResumeMode)),
        boot=BOOTS,
        prompt=TEXT,
        content=DOCUMENTS,
        priority=st.integers(min_value=0, max_value=100),
    )
    def admit_run(
        self,
        run_id: UUID,
        shape: str,
        held: bool,
        session: str | None,
        mode: ResumeMode,
        boot: str,
        prompt: str,
        content: dict[str, Any],
        priority: int,
    ) -> None:
        run, delivery = _records(
            run_id, shape, held, session, mode, boot, prompt, content, priority, self.now
        )
        self.both(lambda ledger: ledger.admit_run(run, delivery))

    @rule(run_id=RUN_IDS, seq=SEQS)
    def release_held(self, run_id: UUID, seq: int) -> None:
        self.both(lambda ledger: ledger.release_held(run_id, seq, self.now))

    @rule(run_id=RUN_IDS, seq=SEQS, reason=REASONS)
    def fail_held(self, run_id: UUID, seq: int, reason: str) -> None:
        self.both(lambda ledger: ledger.fail_held(run_id, seq, reason, self.now))

    @rule(run_id=RUN_IDS, seq=SEQS)
    def mark_published(self, run_id: UUID, seq: int) -> None:
        self.both(lambda ledger: ledger.mark_published(run_id, seq, self.now))

    @rule(run_id=RUN_IDS, seq=SEQS, boot=BOOTS, token=TOKENS)
    def claim_delivery(self, run_id: UUID, seq: int, boot: str, token: str) -> None:
        self.both(lambda ledger: ledger.claim_delivery(run_id, seq, boot, token, self.now))

    @rule(run_id=RUN_IDS, seq=SEQS, settlement=SETTLEMENTS)
    def settle_run(self, run_id: UUID, seq: int, settlement: Settlement) -> None:
        self.both(lambda ledger: ledger.settle_run(run_id, seq, settlement, self.now))

    @rule(run_id=RUN_IDS, seq=SEQS)
    def rotate_delivery(self, run_id: UUID, seq: int) -> None:
        self.both(lambda ledger: ledger.rotate_delivery(run_id, seq, self.now))

    @rule(run_id=RUN_IDS, seq=SEQS, boot=BOOTS, reason=REASONS)
    def fail_orphan(self, run_id: UUID, seq: int, boot: str, reason: str) -> None:
        self.both(lambda ledger: ledger.fail_orphan(run_id, seq, boot, reason, self.now))

    @rule(run_id=RUN_IDS, seq=SEQS, kind=st.sampled_from(["node.start", "node.end"]),
          data=DOCUMENTS)  # fmt: skip
    def append_step(self, run_id: UUID, seq: int, kind: str, data: dict[str, Any]) -> None:
        self.both(lambda ledger: ledger.append_step(run_id, seq, kind, data, self.now))

    @rule(run_id=RUN_IDS, seq=SEQS)
    def read_records(self, run_id: UUID, seq: int) -> None:
        self.both(lambda ledger: ledger.get_run(run_id))
        self.both(lambda ledger: ledger.get_delivery(run_id, seq))
        self.both(lambda ledger: ledger.deliveries(run_id))
        self.both(lambda ledger: ledger.steps(run_id))

    @rule(session=st.sampled_from(["s1", "s2"]), limit=LIMITS)
    def runs_in_session(self, session: str, limit: int) -> None:
        self.both(lambda ledger: ledger.runs_in_session(session, limit))

    @rule(
        statuses=st.lists(st.sampled_from(list(RunStatus)), max_size=4),
        cursor_time_of=st.none() | RUN_IDS,
        cursor_id=RUN_IDS,
        back=st.integers(min_value=0, max_value=6),
        limit=LIMITS,
    )
    def page_runs(
        self,
        statuses: list[RunStatus],
        cursor_time_of: UUID | None,
        cursor_id: UUID,
        back: int,
        limit: int,
    ) -> None:
        """A cursor at some Run's exact updated_at (ties by id matter), or at an arbitrary time."""
        after: tuple[datetime, UUID] | None = None
        if cursor_time_of is not None:
            anchor = self.memory.run_table.get(cursor_time_of)
            at = anchor.updated_at if anchor else self.now - timedelta(seconds=back)
            after = (at, cursor_id)
        self.both(lambda ledger: ledger.page_runs(statuses, after, limit))

    @rule(statuses=st.lists(st.sampled_from(list(RunStatus)), min_size=1, max_size=4),
          limit=st.integers(min_value=1, max_value=3))  # fmt: skip
    def walk_pages(self, statuses: list[RunStatus], limit: int) -> None:
        """Page through everything from each ledger's own cursors: same pages, same order."""
        cursor = None
        for _ in range(20):
            outcome = self.both(
                lambda ledger, after=cursor: ledger.page_runs(statuses, after, limit)
            )
            page: list[Run] = outcome[1]
            if not page:
                return
            cursor = (page[-1].updated_at, page[-1].id)


def _records(
    run_id: UUID,
    shape: str,
    held: bool,
    session: str | None,
    mode: ResumeMode,
    boot: str,
    prompt: str,
    content: dict[str, Any],
    priority: int,
    now: datetime,
) -> tuple[Run, RunDelivery]:
    intent = Intent(pattern="echo", prompt=prompt, session=session, content=content)
    live = shape in ("running", "hardware")
    status = {"running": RunStatus.RUNNING, "hardware": RunStatus.AWAITING_HARDWARE}.get(
        shape, RunStatus.QUEUED
    )
    resumed = shape == "resumed"
    seq = 1 if resumed else 0
    run = Run(
        id=run_id,
        pattern="echo",
        pattern_version=1,
        queue="runs",
        priority=priority,
        status=status,
        seq=seq,
        session=session,
        fingerprint=intent.fingerprint(),
        intent=intent,
        created_at=now,
        updated_at=now,
        started_at=now - timedelta(seconds=5) if resumed else now if live else None,
    )
    state = DeliveryState.CLAIMED if live else DeliveryState.HELD if held else DeliveryState.PENDING
    delivery = RunDelivery(
        run_id=run_id,
        seq=seq + 1 if shape == "mismatch" else seq,
        state=state,
        mode=ResumeMode.RESUME if resumed else mode,
        queue="runs",
        priority=priority,
        held_by="sigil" if state is DeliveryState.HELD else None,
        claimed_boot=boot if live else None,
        claim_token="tok-legacy" if live else None,
        created_at=now,
        updated_at=now,
    )
    return run, delivery


def _empty(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
        conn.execute("TRUNCATE run_step, run_delivery, run")


def test_postgres_ledger_matches_memory_ledger(pg_fresh_dsn: str) -> None:
    asyncio.run(migrate(pg_fresh_dsn))
    run_state_machine_as_test(
        lambda: LedgerDifferential(pg_fresh_dsn), settings=settings.get_profile(PROFILE)
    )
