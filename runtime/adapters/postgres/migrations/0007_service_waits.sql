-- Service waits (seed 000_81a5c720b14d934a.txt, "Service job attempts"): a
-- Run parked AWAITING_SERVICE names the ServiceJobAttempt@1 that owns its
-- wait, and the checkpoint names the attempt its pending snapshot binds, the
-- same shape as consent_id and agent_job_id. Nullable columns only, and an
-- index on the attempt's owner Run: live Runs do not block this migration.

ALTER TABLE run ADD COLUMN service_attempt_id uuid;
ALTER TABLE run_checkpoint ADD COLUMN service_attempt_id uuid;
CREATE INDEX service_job_attempt_run_idx ON service_job_attempt (run_id, created_at, id)
    WHERE run_id IS NOT NULL;
