-- Durable waits (seeds 000 "Events, settlement, and waits" and 003): one
-- checkpoint document per Run, the consents a Run asks for, and the agent
-- jobs it delegates. Only new tables: the outbox is untouched, so live Runs
-- do not block this migration.

CREATE TABLE run_checkpoint (
    run_id       uuid        PRIMARY KEY REFERENCES run (id),
    seq          integer     NOT NULL CHECK (seq >= 0),
    document     jsonb       NOT NULL,
    consent_id   uuid,
    agent_job_id uuid,
    updated_at   timestamptz NOT NULL
);

CREATE TABLE consent (
    id          uuid        PRIMARY KEY,
    run_id      uuid        NOT NULL REFERENCES run (id),
    seq         integer     NOT NULL CHECK (seq >= 0),
    node        text        NOT NULL,
    prompt      text        NOT NULL,
    owner       text        NOT NULL,
    status      text        NOT NULL CHECK (status IN ('PENDING', 'APPROVED', 'DENIED', 'CANCELLED')),
    decided_by  text,
    decided_at  timestamptz,
    created_at  timestamptz NOT NULL
);

CREATE INDEX consent_run_idx ON consent (run_id, created_at, id);

CREATE TABLE agent_job (
    id          uuid        PRIMARY KEY,
    run_id      uuid        NOT NULL REFERENCES run (id),
    seq         integer     NOT NULL CHECK (seq >= 0),
    node        text        NOT NULL,
    request     jsonb       NOT NULL,
    status      text        NOT NULL CHECK (status IN (
                    'SUBMITTED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'LOST', 'CANCELLED')),
    result      jsonb,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL
);

CREATE INDEX agent_job_run_idx ON agent_job (run_id, created_at, id);
