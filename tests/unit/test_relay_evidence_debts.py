"""The relay drops an in-memory evidence debt it cannot owe (issue M9).

A debt names a Run terminal at exactly its sequence (sim.debt_checks
debt_after_truth), and terminal truth is final, so no simulated run reaches a
debt whose Run has vanished or moved to another hop: ci/mutation-equivalents.toml
lists `or` -> `and` in `_repair_evidence` for that reason. The guard stays, so a
debt table that ever holds such an entry is emptied without an error each pass.
"""

from __future__ import annotations

from uuid import UUID

import pytest

from runtime.cancel import Canceller
from runtime.models import RunStatus
from runtime.recovery.relay import Relays
from tests.unit.waitkit import admit, run_of, wait_world

pytestmark = pytest.mark.anyio


async def test_a_debt_of_a_vanished_or_moved_run_is_dropped_without_an_error() -> None:
    w = wait_world()
    run_id = await admit(w, "echo")
    assert run_of(w, run_id).status is RunStatus.QUEUED and run_of(w, run_id).seq == 0
    relays = Relays(w.engine, w.clock.now(), Canceller(w.deps))
    relays.evidence_debt.update({UUID(int=404): 0, run_id: 3})  # absent; another hop's
    await relays._repair_evidence()
    assert relays.evidence_debt == {} and relays.errors == 0
