"""runtime.retry: a database blip is outlasted, a long outage is not hidden.

Issue M11: a PostgreSQL restart during a hop failed its Run for good, because
the PostgreSQL profile did not retry the hop's ledger calls at all and the
simulator, which did retry them, used a bound of about 1.5 s. The bound is now
time (RETRY_BUDGET_S) and both profiles wrap their ledger with the same
`retried`, so the simulator checks what ships.
"""

from __future__ import annotations

import random

import anyio
import pytest
import trio.testing

from runtime import retry
from runtime.errors import LedgerUnavailable
from runtime.retry import RETRY_BUDGET_S, RetryingLedger, retried, retrying


class Entropy:
    def __init__(self) -> None:
        self.rng = random.Random(7)

    def random(self) -> float:
        return self.rng.random()


def _virtual(fn):  # type: ignore[no-untyped-def]
    clock = trio.testing.MockClock(autojump_threshold=0)
    return anyio.run(fn, backend="trio", backend_options={"clock": clock})


def _down_for(seconds: float):  # type: ignore[no-untyped-def]
    calls: list[float] = []

    async def op() -> str:
        now = anyio.current_time()
        calls.append(now)
        if now - calls[0] < seconds:
            raise LedgerUnavailable("database restarting")
        return "committed"

    return op, calls


def test_a_blip_shorter_than_the_bound_is_outlasted() -> None:
    op, calls = _down_for(20.0)

    async def main() -> str:
        return await retrying(Entropy(), op)

    assert _virtual(main) == "committed"
    assert calls[-1] - calls[0] >= 20.0 and len(calls) > 6  # the old bound gave up at 6


def test_an_outage_past_the_bound_raises_its_error() -> None:
    op, calls = _down_for(10 * RETRY_BUDGET_S)

    async def main() -> None:
        await retrying(Entropy(), op)

    with pytest.raises(LedgerUnavailable):
        _virtual(main)
    assert RETRY_BUDGET_S - 3.0 <= calls[-1] - calls[0] <= RETRY_BUDGET_S


def test_the_bound_is_read_at_call_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retry, "RETRY_BUDGET_S", 1.0)
    op, calls = _down_for(5.0)

    async def main() -> None:
        await retrying(Entropy(), op)

    with pytest.raises(LedgerUnavailable):
        _virtual(main)
    assert calls[-1] - calls[0] <= 1.0


def test_other_errors_are_not_retried() -> None:
    calls = 0

    async def op() -> None:
        nonlocal calls
        calls += 1
        raise ValueError("a bug, not a blip")

    async def main() -> None:
        await retrying(Entropy(), op)

    with pytest.raises(ValueError):
        _virtual(main)
    assert calls == 1


def test_retried_wraps_once() -> None:
    inner = object()
    once = retried(inner, Entropy())  # type: ignore[arg-type]
    assert isinstance(once, RetryingLedger)
    assert retried(once, Entropy()) is once  # type: ignore[arg-type]
