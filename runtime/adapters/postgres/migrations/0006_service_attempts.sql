-- ServiceJobAttempt@1 (seed 000_81a5c720b14d934a.txt, "Service job
-- attempts"): one row per attempt, written before the first submit. The
-- idempotency identity is unique, so a changed payload can never reuse it;
-- ACCEPTED and RUNNING carry the provider job identity that was persisted
-- with them. Only a new table: live Runs do not block this migration.

CREATE TABLE service_job_attempt (
    id                  uuid        PRIMARY KEY,
    owner_job           text        NOT NULL,
    run_id              uuid,
    station_attempt     integer,
    idempotency_key     text        NOT NULL UNIQUE CHECK (idempotency_key <> ''),
    generation          integer     NOT NULL CHECK (generation >= 0),
    request             jsonb       NOT NULL,
    request_digest      text        NOT NULL,
    binding             jsonb       NOT NULL,
    envelope            jsonb       NOT NULL,
    state               text        NOT NULL CHECK (state IN (
                            'PREPARED', 'SUBMITTING', 'ACCEPTED', 'RUNNING', 'SUCCEEDED',
                            'FAILED', 'CANCELLED', 'INDETERMINATE')),
    provider_job_id     text,
    progress_cursor     text,
    result              jsonb,
    diagnostic          jsonb,
    usage               jsonb,
    transmissions       integer     NOT NULL CHECK (transmissions >= 0),
    cancel_requested_at timestamptz,
    evidence            jsonb       NOT NULL,
    version             integer     NOT NULL CHECK (version >= 1),
    created_at          timestamptz NOT NULL,
    updated_at          timestamptz NOT NULL,
    CHECK (state NOT IN ('ACCEPTED', 'RUNNING') OR provider_job_id IS NOT NULL),
    CHECK (state <> 'PREPARED' OR transmissions = 0)
);

CREATE INDEX service_job_attempt_open_idx ON service_job_attempt (created_at, id)
    WHERE state NOT IN ('SUCCEEDED', 'FAILED', 'CANCELLED');
