-- Startup in O(work still open) (issue 15, item 2; seed 000_81a5c720b14d934a.txt,
-- "Cancellation, mutation, and recovery"). Startup used to page every terminal
-- Run ever stored; it now pages only what is still owed, each debt recorded
-- where it arises and read through a partial index that holds only debtors:
--
-- * terminal_step: true once a Run has a terminal Step (set by append_step in
--   the Step's own transaction). A terminal Run without one owes its evidence.
-- * late_fence_owed: set by finish_cancel in the transaction that exposes
--   CANCELLED; startup clears it once it has probed (and, if need be,
--   aborted) a late hop job of that sequence.
--
-- Checkpoint-deletion debt needs no column: a terminal Run's checkpoint row
-- is the debt, and run_checkpoint holds only open work and debt.
-- Nullable-free columns with constant defaults and a backfill: live Runs do
-- not block this migration.

ALTER TABLE run ADD COLUMN terminal_step boolean NOT NULL DEFAULT false;
ALTER TABLE run ADD COLUMN late_fence_owed boolean NOT NULL DEFAULT false;

UPDATE run SET terminal_step = true
 WHERE EXISTS (SELECT 1 FROM run_step s
                WHERE s.run_id = run.id
                  AND s.kind IN ('run.done', 'run.failed', 'run.cancelled'));

-- A Run cancelled before this migration may still have a late job queued:
-- the first startup after it probes each once, later startups only new ones.
UPDATE run SET late_fence_owed = true WHERE status = 'CANCELLED';

CREATE INDEX run_evidence_debt_idx ON run (updated_at, id)
    WHERE NOT terminal_step AND status IN ('CANCELLED', 'DONE', 'FAILED');

CREATE INDEX run_late_fence_debt_idx ON run (updated_at, id)
    WHERE late_fence_owed;
