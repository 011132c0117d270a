"""The Bridge session fence: at most one nonterminal Run per session in this process."""

from __future__ import annotations

import anyio
import pytest

from runtime.errors import SessionBusy
from runtime.models import Intent, RunStatus
from runtime.worker import HopOutcome
from tests.unit.fakes import make_world

pytestmark = pytest.mark.anyio


async def test_second_nonterminal_run_in_session_is_refused() -> None:
    w = make_world()
    first = await w.engine.submit(Intent(pattern="echo", session="chat-1", prompt="one"))
    before, jobs_before = w.dump(), w.jobs()

    with pytest.raises(SessionBusy) as info:
        await w.engine.submit(Intent(pattern="echo", session="chat-1", prompt="two"))

    assert info.value.field == "session"
    assert info.value.run_id == first.run.id
    assert w.dump() == before and w.jobs() == jobs_before


async def test_session_refuses_while_first_run_is_running() -> None:
    w = make_world()
    first = await w.engine.submit(Intent(pattern="echo", session="chat-1"))
    claim = await w.ledger.claim_delivery(first.run.id, 0, "boot-1", "t", w.clock.now())
    assert claim.claimed
    with pytest.raises(SessionBusy):
        await w.engine.submit(Intent(pattern="echo", session="chat-1", prompt="again"))


async def test_exact_replay_in_a_busy_session_is_allowed() -> None:
    w = make_world()
    intent = Intent(pattern="echo", session="chat-1", idempotency_key="turn-1")
    first = await w.engine.submit(intent)
    again = await w.engine.submit(intent)
    assert again.run.id == first.run.id and again.created is False
    # A different key in the same session is still refused.
    with pytest.raises(SessionBusy):
        await w.engine.submit(intent.model_copy(update={"idempotency_key": "turn-2"}))


async def test_terminal_run_releases_the_session() -> None:
    w = make_world()
    first = await w.engine.submit(Intent(pattern="echo", session="chat-1", prompt="one"))
    assert await w.worker.perform_run(first.run.id, 0) is HopOutcome.SETTLED
    assert w.ledger.run_table[first.run.id].status is RunStatus.DONE

    second = await w.engine.submit(Intent(pattern="echo", session="chat-1", prompt="two"))
    assert second.created and second.run.id != first.run.id


async def test_concurrent_admissions_in_one_session_admit_exactly_one() -> None:
    w = make_world()
    admitted: list[str] = []
    refused: list[str] = []

    async def one(i: int) -> None:
        try:
            await w.engine.submit(Intent(pattern="echo", session="chat-1", prompt=str(i)))
            admitted.append(str(i))
        except SessionBusy:
            refused.append(str(i))

    async with anyio.create_task_group() as tg:
        for i in range(5):
            tg.start_soon(one, i)

    assert len(admitted) == 1 and len(refused) == 4
    assert len(w.dump().runs) == 1 and len(w.jobs()) == 1


async def test_sessions_do_not_fence_each_other() -> None:
    w = make_world()
    await w.engine.submit(Intent(pattern="echo", session="chat-1"))
    await w.engine.submit(Intent(pattern="echo", session="chat-2"))
    await w.engine.submit(Intent(pattern="echo"))
    await w.engine.submit(Intent(pattern="echo"))
    assert len(w.dump().runs) == 4
