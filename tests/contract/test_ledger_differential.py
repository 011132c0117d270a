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
    AgentJob,
    AgentJobStatus,
    CheckpointRecord,
    Consent,
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
    "stateful_step_count": 50,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
    "print_blob": True,
}
settings.register_profile("ledger-differential-ci", max_examples=200, **_COMMON)
settings.register_profile("ledger-differential-dev", max_examples=40, **_COMMON)
PROFILE = "ledger-differential-ci" if os.environ.get("CI") else "ledger-differential-dev"

RUN_IDS = st.sampled_from([uid(n) for n in range(1, 4)])
# Mostly the Run's current sequence (read from the reference ledger), sometimes a stale
# or future one: the rules then reach claims, parks and readmits often enough.
SEQS = st.sampled_from(["current", "current", "current", 0, 1, 2])
BOOTS = st.sampled_from(["boot-a", "boot-b"])
TOKENS = st.sampled_from(["tok-1", "tok-2", "tok-3"])
REASONS = st.sampled_from(["stasis lost", "retention failed", "orphaned"])
SESSIONS = st.sampled_from([None, "s1", "s2"])
LIMITS = st.integers(min_value=0, max_value=5)
CONSENT_IDS = st.sampled_from([uid(n) for n in range(101, 104)])
JOB_IDS = st.sampled_from([uid(n) for n in range(201, 204)])
OWNERS = st.none() | CONSENT_IDS
JOB_OWNERS = st.none() | JOB_IDS
PRINCIPALS = st.sampled_from(["alice", "bob"])

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
# settle_run's own terminal Step (issue 17): mostly none or a terminal kind; a
# non-terminal kind is refused by both alike.
SETTLEMENT_STEPS = st.none() | st.tuples(
    st.sampled_from(["run.done", "run.failed", "run.cancelled", "run.done", "node.end"]),
    DOCUMENTS,
)
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
            except ValueError:
                return ("raised", "ValueError")
            except LookupError:
                return ("raised", "LookupError")

        return self.loop.run(attempt())

    def _both_raw(self, call: Callable[[Ledger], Awaitable[T]]) -> tuple[T, T]:
        return self.loop.run(call(self.memory)), self.loop.run(call(self.postgres))

    def both(self, call: Callable[[Ledger], Awaitable[Any]]) -> Any:
        expected = self._outcome(self.memory, call)
        actual = self._outcome(self.postgres, call)
        assert actual == expected, f"postgres {actual!r} != memory {expected!r}"
        return expected

    def seq(self, choice: int | str, run_id: UUID) -> int:
        """Resolve a SEQS draw: "current" is the Run's sequence in the reference ledger."""
        if isinstance(choice, int):
            return choice
        run = self.memory.run_table.get(run_id)
        return run.seq if run is not None else 0

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

    @rule(run_id=RUN_IDS, pick=SEQS)
    def release_held(self, run_id: UUID, pick: int | str) -> None:
        seq = self.seq(pick, run_id)
        self.both(lambda ledger: ledger.release_held(run_id, seq, self.now))

    @rule(run_id=RUN_IDS, pick=SEQS, reason=REASONS)
    def fail_held(self, run_id: UUID, pick: int | str, reason: str) -> None:
        seq = self.seq(pick, run_id)
        self.both(lambda ledger: ledger.fail_held(run_id, seq, reason, self.now))

    @rule(run_id=RUN_IDS, pick=SEQS)
    def mark_published(self, run_id: UUID, pick: int | str) -> None:
        seq = self.seq(pick, run_id)
        self.both(lambda ledger: ledger.mark_published(run_id, seq, self.now))

    @rule(run_id=RUN_IDS, pick=SEQS, boot=BOOTS, token=TOKENS)
    def claim_delivery(self, run_id: UUID, pick: int | str, boot: str, token: str) -> None:
        seq = self.seq(pick, run_id)
        self.both(lambda ledger: ledger.claim_delivery(run_id, seq, boot, token, self.now))

    @rule(run_id=RUN_IDS, pick=SEQS, settlement=SETTLEMENTS, step=SETTLEMENT_STEPS)
    def settle_run(
        self, run_id: UUID, pick: int | str, settlement: Settlement,
        step: tuple[str, dict[str, Any]] | None,
    ) -> None:
        seq = self.seq(pick, run_id)
        self.both(lambda ledger: ledger.settle_run(run_id, seq, settlement, self.now, step))

    @rule(run_id=RUN_IDS, pick=SEQS)
    def rotate_delivery(self, run_id: UUID, pick: int | str) -> None:
        seq = self.seq(pick, run_id)
        self.both(lambda ledger: ledger.rotate_delivery(run_id, seq, self.now))

    @rule(run_id=RUN_IDS, pick=SEQS, boot=BOOTS, reason=REASONS)
    def fail_orphan(self, run_id: UUID, pick: int | str, boot: str, reason: str) -> None:
        seq = self.seq(pick, run_id)
        self.both(lambda ledger: ledger.fail_orphan(run_id, seq, boot, reason, self.now))

    @rule(run_id=RUN_IDS, pick=SEQS, token=TOKENS, reason=REASONS)
    def fail_abandoned(self, run_id: UUID, pick: int | str, token: str, reason: str) -> None:
        seq = self.seq(pick, run_id)
        self.both(lambda ledger: ledger.fail_abandoned(run_id, seq, token, reason, self.now))

    @rule(run_id=RUN_IDS, pick=SEQS,
          kind=st.sampled_from(["node.start", "node.end", "run.done", "run.cancelled"]),
          data=DOCUMENTS)  # fmt: skip
    def append_step(self, run_id: UUID, pick: int | str, kind: str, data: dict[str, Any]) -> None:
        seq = self.seq(pick, run_id)  # an unknown Run: LookupError from both
        self.both(lambda ledger: ledger.append_step(run_id, seq, kind, data, self.now))

    @rule(run_id=RUN_IDS, pick=SEQS, items=st.lists(
        st.tuples(st.sampled_from(["node.start", "node.end"]), DOCUMENTS), max_size=3))
    def append_steps(
        self, run_id: UUID, pick: int | str, items: list[tuple[str, dict[str, Any]]]
    ) -> None:
        seq = self.seq(pick, run_id)
        self.both(lambda ledger: ledger.append_steps(run_id, seq, items, self.now))

    @rule(run_id=RUN_IDS, pick=SEQS)
    def read_records(self, run_id: UUID, pick: int | str) -> None:
        seq = self.seq(pick, run_id)
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

    # -- durable waits -------------------------------------------------------------

    @rule(run_id=RUN_IDS, pick=SEQS, consent=OWNERS, job=JOB_OWNERS, document=DOCUMENTS)
    def save_checkpoint(
        self,
        run_id: UUID,
        pick: int | str,
        consent: UUID | None,
        job: UUID | None,
        document: dict[str, Any],
    ) -> None:
        seq = self.seq(pick, run_id)
        record = CheckpointRecord(
            run_id=run_id,
            seq=seq,
            document=document,
            consent_id=consent,
            agent_job_id=job,
            updated_at=self.now,
        )
        self.both(lambda ledger: ledger.save_checkpoint(record))

    @rule(run_id=RUN_IDS)
    def checkpoint_reads_and_delete(self, run_id: UUID) -> None:
        self.both(lambda ledger: ledger.load_checkpoint(run_id))
        self.both(lambda ledger: ledger.delete_checkpoint(run_id))

    @rule(consent_id=CONSENT_IDS, run_id=RUN_IDS, pick=SEQS, prompt=TEXT)
    def create_consent(self, consent_id: UUID, run_id: UUID, pick: int | str, prompt: str) -> None:
        seq = self.seq(pick, run_id)
        consent = Consent(
            id=consent_id,
            run_id=run_id,
            seq=seq,
            node="gate",
            prompt=prompt,
            owner="alice",
            created_at=self.now,
        )
        self.both(lambda ledger: ledger.create_consent(consent))

    @rule(consent_id=CONSENT_IDS, approve=st.booleans(), principal=PRINCIPALS)
    def decide_consent(self, consent_id: UUID, approve: bool, principal: str) -> None:
        self.both(lambda ledger: ledger.decide_consent(consent_id, approve, principal, self.now))

    @rule(consent_id=CONSENT_IDS)
    def cancel_consent(self, consent_id: UUID) -> None:
        self.both(lambda ledger: ledger.cancel_consent(consent_id, self.now))

    @rule(run_id=RUN_IDS, pick=SEQS, consent_id=CONSENT_IDS, prepare=st.booleans())
    def park_consent(self, run_id: UUID, pick: int | str, consent_id: UUID, prepare: bool) -> None:
        """With `prepare`, first write the consent and a checkpoint binding it (each compared)."""
        seq = self.seq(pick, run_id)
        if prepare:
            self.create_consent(consent_id, run_id, seq, "ok?")
            self.save_checkpoint(run_id, seq, consent_id, None, {"at": "gate"})
        self.both(lambda ledger: ledger.park_consent(run_id, seq, consent_id, self.now))

    @rule(run_id=RUN_IDS, consent_id=CONSENT_IDS)
    def readmit_after_consent(self, run_id: UUID, consent_id: UUID) -> None:
        self.both(lambda ledger: ledger.readmit_after_consent(run_id, consent_id, self.now))

    @rule(job_id=JOB_IDS, run_id=RUN_IDS, pick=SEQS, request=DOCUMENTS)
    def create_agent_job(
        self, job_id: UUID, run_id: UUID, pick: int | str, request: dict[str, Any]
    ) -> None:
        seq = self.seq(pick, run_id)
        job = AgentJob(
            id=job_id,
            run_id=run_id,
            seq=seq,
            node="delegate",
            request=request,
            created_at=self.now,
            updated_at=self.now,
        )
        self.both(lambda ledger: ledger.create_agent_job(job))

    @rule(
        job_id=JOB_IDS,
        status=st.sampled_from(list(AgentJobStatus)),
        result=st.none() | DOCUMENTS,
    )
    def record_agent_job(
        self, job_id: UUID, status: AgentJobStatus, result: dict[str, Any] | None
    ) -> None:
        self.both(lambda ledger: ledger.record_agent_job(job_id, status, result, self.now))

    @rule(run_id=RUN_IDS, pick=SEQS, job_id=JOB_IDS, prepare=st.booleans())
    def park_delegate(self, run_id: UUID, pick: int | str, job_id: UUID, prepare: bool) -> None:
        seq = self.seq(pick, run_id)
        if prepare:
            self.create_agent_job(job_id, run_id, seq, {"task": "x"})
            self.save_checkpoint(run_id, seq, None, job_id, {"at": "delegate"})
        self.both(lambda ledger: ledger.park_delegate(run_id, seq, job_id, self.now))

    @rule(run_id=RUN_IDS, job_id=JOB_IDS)
    def readmit_after_delegate(self, run_id: UUID, job_id: UUID) -> None:
        self.both(lambda ledger: ledger.readmit_after_delegate(run_id, job_id, self.now))

    @rule(run_id=RUN_IDS, consent_id=CONSENT_IDS, job_id=JOB_IDS)
    def wait_reads(self, run_id: UUID, consent_id: UUID, job_id: UUID) -> None:
        self.both(lambda ledger: ledger.get_consent(consent_id))
        self.both(lambda ledger: ledger.consents_of(run_id))
        self.both(lambda ledger: ledger.get_agent_job(job_id))
        self.both(lambda ledger: ledger.agent_jobs_of(run_id))

    @rule(run_id=RUN_IDS, pick=SEQS, resume=st.booleans())
    def hardware(self, run_id: UUID, pick: int | str, resume: bool) -> None:
        seq = self.seq(pick, run_id)
        if resume:
            self.both(lambda ledger: ledger.resume_hardware(run_id, seq, self.now))
        else:
            self.both(lambda ledger: ledger.await_hardware(run_id, seq, self.now))

    @rule(run_id=RUN_IDS)
    def begin_cancel(self, run_id: UUID) -> None:
        self.both(lambda ledger: ledger.begin_cancel(run_id, self.now))

    @rule(run_id=RUN_IDS, pick=SEQS)
    def finish_cancel(self, run_id: UUID, pick: int | str) -> None:
        seq = self.seq(pick, run_id)
        self.both(lambda ledger: ledger.finish_cancel(run_id, seq, self.now))

    @rule(limit=LIMITS)
    def startup_debts(self, limit: int) -> None:
        """Issue 15's startup debts: the same debtors in the same order."""
        self.both(lambda ledger: ledger.evidence_debts(None, limit))
        self.both(lambda ledger: ledger.late_fence_debts(None, limit))
        self.both(lambda ledger: ledger.checkpoint_debts(limit))

    @rule(run_id=RUN_IDS)
    def settle_late_fence(self, run_id: UUID) -> None:
        self.both(lambda ledger: ledger.settle_late_fence(run_id))

    # -- composite paths (each step still compared) ----------------------------------

    @rule(run_id=RUN_IDS, held=st.booleans(), boot=BOOTS, token=TOKENS)
    def drive_to_running(self, run_id: UUID, held: bool, boot: str, token: str) -> None:
        """Admit (or find) a Run and walk its current hop to a claim: the common path."""
        self.admit_run(run_id, "queued", held, None, ResumeMode.FRESH, boot, "go", {}, 50)
        self.release_held(run_id, "current")
        self.mark_published(run_id, "current")
        self.claim_delivery(run_id, "current", boot, token)

    @rule(run_id=RUN_IDS, consent_id=CONSENT_IDS, approve=st.booleans(), principal=PRINCIPALS)
    def consent_round(self, run_id: UUID, consent_id: UUID, approve: bool, principal: str) -> None:
        """Ask, park, decide and readmit: the consent wait end to end."""
        self.park_consent(run_id, "current", consent_id, True)
        self.decide_consent(consent_id, approve, principal)
        self.readmit_after_consent(run_id, consent_id)

    @rule(run_id=RUN_IDS, job_id=JOB_IDS, status=st.sampled_from(list(AgentJobStatus)))
    def delegate_round(self, run_id: UUID, job_id: UUID, status: AgentJobStatus) -> None:
        """Delegate, park, report and readmit: the delegated wait end to end."""
        self.park_delegate(run_id, "current", job_id, True)
        self.record_agent_job(job_id, status, {"answer": 1})
        self.readmit_after_delegate(run_id, job_id)

    @rule(run_id=RUN_IDS, consent_id=CONSENT_IDS, ask=st.booleans())
    def cancel_round(self, run_id: UUID, consent_id: UUID, ask: bool) -> None:
        """Cancel a Run end to end, optionally while a consent of its hop is pending."""
        if ask:
            self.create_consent(consent_id, run_id, "current", "ok?")
        self.begin_cancel(run_id)
        self.finish_cancel(run_id, "current")
        self.wait_reads(run_id, consent_id, uid(201))


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
        conn.execute("TRUNCATE run_checkpoint, consent, agent_job, run_step, run_delivery, run")


def test_postgres_ledger_matches_memory_ledger(pg_fresh_dsn: str) -> None:
    asyncio.run(migrate(pg_fresh_dsn))
    run_state_machine_as_test(
        lambda: LedgerDifferential(pg_fresh_dsn), settings=settings.get_profile(PROFILE)
    )
