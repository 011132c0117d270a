"""Invariants of the ledger retry (runtime.retry), read off the attempts each call made.

Every boot's ledger is `retried(SimLedger)`; the world wraps that once more in
a `RetryWatch`, which opens a record for each call a runtime caller makes and
lets the SimLedger below note every attempt of it (when it began, when it
failed with a transient error). When the call returns or raises, the record is
judged against the retry contract as the checker knows it: the constants below
are the checker's own copy, so a change to runtime.retry that alters the
contract must change them too, on purpose.

- `retry_backoff`: after its k-th transient failure (k from 0) a call waits
  min(CAP_S, BASE_S * 2**k) scaled by a jitter in [0.5, 1.5) before its next
  attempt (and over a world's retries the jitter falls on both sides of 1),
  and a Step append (durable best effort with its own repair) is never
  repeated by the retry at all.
- `retry_outlasts_blip`: a call retries for as long as its next attempt would
  still fall inside BUDGET_S of its first failure, and never longer: a
  database blip shorter than the budget (sim.faults: every outage is) is
  outlasted, and a call that gives up has really spent its budget.

Only the virtual clock is read, and nothing here awaits or draws a random
number, so watching a world changes none of its traces.
"""

from __future__ import annotations

import itertools
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import trio

from runtime.errors import LedgerUnavailable

if TYPE_CHECKING:
    from sim.checker import Checker

BASE_S = 0.05
CAP_S = 2.0
BUDGET_S = 30.0
JITTER = (0.5, 1.5)
STEP_APPENDS = frozenset({"append_step", "append_steps"})
"""Passed through unretried (runtime.events repairs a lost Step; a blind repeat doubles it)."""
EPS = 1e-6

INVARIANTS = (
    ("retry_backoff", "a ledger call retried after a transient error waits a jittered, "
     "exponentially growing delay (0.05 s doubling, capped at 2 s, times 0.5-1.5) before "
     "each next attempt; a Step append is never repeated blindly",
     "runtime/retry.py; issue M11"),
    ("retry_outlasts_blip", "a ledger call keeps retrying while its next attempt falls "
     "within the 30 s retry budget of its first failure and never past it: a database "
     "blip shorter than the budget never reaches the caller",
     "seed 000 'Cancellation, mutation, and recovery' (FAILED claims what was proved); "
     "issue M11"),
)


@dataclass
class Attempt:
    began: float
    failed: float | None = None


@dataclass
class CallRecord:
    name: str
    attempts: list[Attempt] = field(default_factory=list)


CURRENT: ContextVar[CallRecord | None] = ContextVar("sim_retry_call", default=None)


def attempt_began() -> Attempt | None:
    """Called by the SimLedger as an attempt starts: the watched call it belongs to."""
    record = CURRENT.get()
    if record is None:
        return None
    attempt = Attempt(trio.current_time())
    record.attempts.append(attempt)
    return attempt


def delay_bounds(k: int) -> tuple[float, float]:
    """The wait after the k-th failure (k from 0): [low, high) in seconds."""
    d = min(CAP_S, BASE_S * 2**k)
    return JITTER[0] * d, JITTER[1] * d


class RetryWatch:
    """A ledger seen through the watch: transparent, except that each call of a
    public method opens a CallRecord for the attempts made beneath it."""

    def __init__(self, inner: Any, checks: RetryChecks) -> None:
        self._inner = inner
        self._checks = checks

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name.startswith("_") or not callable(attr):
            return attr

        checks = self._checks

        async def call(*args: Any, **kwargs: Any) -> Any:
            # RetryChecks.watch, inline: one coroutine frame fewer under every ledger
            # call (each of its checkpoints resumes them all).
            record = CallRecord(name)
            token = CURRENT.set(record)
            gave_up = False
            try:
                return await attr(*args, **kwargs)
            except LedgerUnavailable:
                gave_up = True
                raise
            finally:
                CURRENT.reset(token)
                if gave_up or len(record.attempts) > 1:  # else judge finds nothing to judge
                    checks.checker._guarded(lambda: checks.judge(record, gave_up))

        # Kept: later lookups find it without __getattr__ (nor the inner ledger's own,
        # which builds its wrapper afresh each time). The wrappers hold no state of a
        # call, and the ledgers' methods are fixed once a world is built.
        self.__dict__[name] = call
        return call


JITTER_SAMPLE = 40
"""Waits observed before the jitter's spread is judged: a uniform draw on
[0.5, 1.5) stays on one side of 1.0 for all of them with probability 2 * 0.5**40."""


class RetryChecks:
    def __init__(self, checker: Checker) -> None:
        self.checker = checker
        self.factors: list[float] = []
        """Each observed wait divided by its undithered delay: the jitter drawn."""

    def final(self) -> None:
        """The jitter spreads over its whole range, both sides of the nominal delay."""
        if len(self.factors) < JITTER_SAMPLE:
            return
        low, high = min(self.factors), max(self.factors)
        if low >= 1.0 or high <= 1.0:
            self.checker.fail("retry_backoff", f"the jitter of {len(self.factors)} retry waits "
                              f"stayed within [{low:.4g}, {high:.4g}]: drawn on one side of "
                              "the nominal delay only")

    def judge(self, record: CallRecord, gave_up: bool) -> None:
        """The call's attempts against the contract. One that neither gave up nor made
        a second attempt has nothing to judge: RetryWatch does not ask."""
        attempts = record.attempts
        if record.name in STEP_APPENDS:
            if len(attempts) > 1:
                self.checker.fail("retry_backoff", f"{record.name} was attempted "
                                  f"{len(attempts)} times by one call: a Step append is "
                                  "never retried blindly")
            return
        first_failure: float | None = None
        for k, (prev, nxt) in enumerate(itertools.pairwise(attempts)):
            if prev.failed is None:
                self.checker.fail("retry_backoff", f"{record.name} attempt {k + 2} followed "
                                  f"attempt {k + 1}, which did not fail transiently")
                return
            first_failure = prev.failed if first_failure is None else first_failure
            low, high = delay_bounds(k)
            gap = nxt.began - prev.failed
            self.factors.append(gap / min(CAP_S, BASE_S * 2**k))
            if not low - EPS <= gap <= high + EPS:
                self.checker.fail("retry_backoff", f"{record.name} waited {gap:.6g} s after "
                                  f"failure {k + 1}; the backoff allows [{low:g}, {high:g}) s")
                return
            if nxt.began - first_failure > BUDGET_S + EPS:
                self.checker.fail("retry_outlasts_blip", f"{record.name} retried "
                                  f"{nxt.began - first_failure:.6g} s after its first failure, "
                                  f"past the {BUDGET_S:g} s budget")
                return
        if not gave_up or not attempts:
            return
        began, last = attempts[0].failed, attempts[-1].failed
        if began is None or last is None:
            return
        spent = last - began
        _, high = delay_bounds(len(attempts) - 1)
        if spent + high <= BUDGET_S - EPS:
            self.checker.fail("retry_outlasts_blip", f"{record.name} gave up after "
                              f"{len(attempts)} attempts and {spent:.6g} s, with its next "
                              f"attempt due within the {BUDGET_S:g} s budget")
