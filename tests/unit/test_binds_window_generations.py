"""binds_window compares generation numbers by value (issue M9).

CPython shares ints up to 256, so `record.seq is not run.seq` and `!=` agree for
every generation a simulated Run reaches (at most 8 over every scenario, swarm
seeds 1-5); past 256 a PostgreSQL read decodes a new int for each column, and an
identity test would refuse every pre-park window of a long-lived Run. This pins
the value comparison there; ci/mutation-equivalents.toml says why the simulator
cannot."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import UUID

from runtime.graph.snapshots import Checkpoint, NodeSnapshot, SnapshotStatus
from runtime.models import CheckpointRecord, Run
from runtime.recovery.orphans import binds_window
from tests.contract.ledger_records import make_run

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _window(run: Run, seq: int) -> CheckpointRecord:
    consent = UUID(int=99)
    snap = NodeSnapshot(node="ask", state={}, status=SnapshotStatus.PENDING, run_id=run.id,
                        consent_id=consent)
    doc = Checkpoint(run_id=run.id, pattern=run.pattern, pattern_version=run.pattern_version,
                     history=[snap]).document()
    return CheckpointRecord(run_id=run.id, seq=seq, document=doc, consent_id=consent,
                            updated_at=T0)


def test_a_window_past_the_small_int_cache_binds_by_value() -> None:
    run = make_run(UUID(int=7), seq=300)
    decoded = int("300")  # as a driver decodes it: equal, not the same object
    assert decoded == run.seq and decoded is not run.seq
    assert binds_window(_window(run, decoded), run)
    assert not binds_window(_window(run, 299), run)
