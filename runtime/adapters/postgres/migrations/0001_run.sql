-- The canonical Run record (seed 000_81a5c720b14d934a.txt, "Admission and
-- exact claim"). Status and sequence are plain columns so transactions can
-- lock and compare them; the Intent and the settled result are JSONB.
-- Timestamps are written by the caller's Clock, never by now().

CREATE TABLE run (
    id                uuid        PRIMARY KEY,
    pattern           text        NOT NULL,
    pattern_version   integer     NOT NULL,
    queue             text        NOT NULL,
    priority          smallint    NOT NULL CHECK (priority BETWEEN 0 AND 100),
    status            text        NOT NULL CHECK (status IN (
                          'QUEUED', 'RUNNING', 'AWAITING_HARDWARE', 'AWAITING_CONSENT',
                          'AWAITING_DELEGATE', 'AWAITING_SERVICE', 'CANCELLING',
                          'DONE', 'FAILED', 'CANCELLED')),
    seq               integer     NOT NULL CHECK (seq >= 0),
    session           text,
    idempotency_scope text,
    idempotency_key   text,
    fingerprint       text        NOT NULL,
    intent            jsonb       NOT NULL,
    created_at        timestamptz NOT NULL,
    updated_at        timestamptz NOT NULL,
    started_at        timestamptz,
    result            jsonb,
    error             text,
    consent_id        uuid,
    agent_job_id      uuid
);

-- page_runs: keyset paging by (updated_at, id) within a set of statuses.
CREATE INDEX run_status_updated_idx ON run (status, updated_at, id);

-- runs_in_session: the bounded lookup of a session's nonterminal Runs.
CREATE INDEX run_open_session_idx ON run (session, created_at, id)
    WHERE session IS NOT NULL AND status NOT IN ('DONE', 'FAILED', 'CANCELLED');

-- dump and checkers: (created_at, id) order.
CREATE INDEX run_created_idx ON run (created_at, id);
