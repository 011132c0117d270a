"""Reads hand back fresh identity objects, on every ledger (issue M9).

PostgreSQL decodes a new object for each column of each row, so a caller that
compares a boot id, a claim token, a Run id or a generation number by identity
(`is`) instead of by value is wrong there. The memory ledger, the simulator's
disk, must be wrong for that caller too, or a mutant `==` -> `is` survives every
simulated seed (runtime/recovery/orphans.py's own-claim test did). Each read is
therefore equal to what was written and shares none of its id objects.
"""

from __future__ import annotations

from typing import Any

import pytest

from runtime.models import CheckpointRecord, DeliveryState, RunStatus
from runtime.seams import Ledger
from tests.contract.ledger_records import at, make_delivery, make_run, uid

pytestmark = pytest.mark.anyio


def _fresh(got: Any, kept: Any, *names: str) -> None:
    """`got` equals `kept` field by field, and no named field is the same object."""
    for name in names:
        value, original = getattr(got, name), getattr(kept, name)
        assert value == original, name
        assert value is not original, f"{name} came back as the very object written"


async def test_reads_hand_back_fresh_ids(ledger: Ledger) -> None:
    boot, token = "-".join(("boot", "a1")), "-".join(("token", "t1"))  # built, not interned
    run = make_run(uid(7), session="-".join(("session", "s1")))
    assert (await ledger.admit_run(run, make_delivery(run))).created  # hands back what it was
    claim = await ledger.claim_delivery(run.id, 0, boot, token, at(1))
    assert claim.claimed and claim.delivery is not None and claim.run is not None
    written = claim.delivery
    assert (written.claimed_boot, written.claim_token) == (boot, token)
    assert written.claimed_boot is not boot and written.claim_token is not token
    for delivery in (await ledger.get_delivery(run.id, 0), *await ledger.deliveries(run.id)):
        assert delivery is not None and delivery.state is DeliveryState.CLAIMED
        _fresh(delivery, written, "run_id", "claimed_boot", "claim_token")
    for got in (await ledger.get_run(run.id), claim.run,
                *await ledger.page_runs([RunStatus.RUNNING], None, 10)):
        assert got is not None
        _fresh(got, run, "id", "session")
    again = await ledger.admit_run(run, make_delivery(run))
    assert not again.created
    _fresh(again.delivery, written, "claimed_boot", "claim_token")


async def test_steps_and_checkpoints_read_fresh(ledger: Ledger) -> None:
    run = make_run(uid(8))
    await ledger.admit_run(run, make_delivery(run))
    assert (await ledger.claim_delivery(run.id, 0, "boot-b", "token-b", at(1))).claimed
    step = await ledger.append_step(run.id, 0, "node.started", {"node": "a"}, at(1))
    for got in await ledger.steps(run.id):
        _fresh(got, step, "run_id")
    record = CheckpointRecord(run_id=run.id, seq=0, document={"nodes": []},
                              consent_id=uid(9), updated_at=at(2))
    assert await ledger.save_checkpoint(record)
    loaded = await ledger.load_checkpoint(run.id)
    assert loaded is not None
    _fresh(loaded, record, "run_id", "consent_id")


async def test_a_generation_past_the_small_int_cache_reads_fresh(ledger: Ledger) -> None:
    """CPython shares ints up to 256 whoever makes them; past that a decoded
    generation number is a new int, so `seq is seq` is false on PostgreSQL and
    must be here too (runtime/recovery/orphans.py binds_window compares them)."""
    run = make_run(uid(10), seq=300)
    await ledger.admit_run(run, make_delivery(run))
    got = await ledger.get_run(run.id)
    delivery = await ledger.get_delivery(run.id, 300)
    assert got is not None and delivery is not None
    assert got.seq == delivery.seq == run.seq == 300
    assert got.seq is not run.seq and delivery.seq is not got.seq
    assert (await ledger.get_run(run.id)).seq is not got.seq  # type: ignore[union-attr]
