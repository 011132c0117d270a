-- Leased jobs (seed 004_85033eb8fc772f12.txt): preserved evidence, the job
-- that interprets it, every interpretation staged for it, and the attempt
-- events (started, completed, failed, expired_lease). Only new tables: the
-- run outbox is untouched, so live Runs do not block this migration.
-- Timestamps come from the caller's Clock, never from now().

CREATE TABLE job_evidence (
    id          uuid        PRIMARY KEY,
    workspace   text        NOT NULL CHECK (workspace <> ''),
    media_type  text        NOT NULL,
    payload     text        NOT NULL,
    digest      text        NOT NULL,
    received_at timestamptz NOT NULL
);

CREATE TABLE leased_job (
    id                   uuid             PRIMARY KEY,
    workspace            text             NOT NULL CHECK (workspace <> ''),
    evidence_id          uuid             NOT NULL REFERENCES job_evidence (id),
    state                text             NOT NULL CHECK (state IN (
                             'queued', 'retry_scheduled', 'waiting_ontology',
                             'waiting_identity', 'waiting_review', 'published',
                             'failed', 'exhausted')),
    model_version        text             NOT NULL,
    fence                bigint           NOT NULL CHECK (fence >= 0),
    lease_owner          text,
    lease_expires_at     timestamptz,
    lease_renewed_at     timestamptz,
    lease_s              double precision NOT NULL CHECK (lease_s > 0),
    attempts_used        integer          NOT NULL CHECK (attempts_used >= 0),
    max_attempts         integer          NOT NULL CHECK (max_attempts >= 1),
    model_calls_reserved integer          NOT NULL CHECK (model_calls_reserved >= 0),
    max_model_calls      integer          NOT NULL CHECK (max_model_calls >= 1),
    interpretation       integer          NOT NULL CHECK (interpretation >= 1),
    retry_at             timestamptz,
    settled_fence        bigint,
    bundle               jsonb,
    diagnostic           jsonb,
    error                text,
    created_at           timestamptz      NOT NULL,
    updated_at           timestamptz      NOT NULL,
    CHECK (attempts_used <= max_attempts),
    CHECK (model_calls_reserved <= max_model_calls),
    CHECK ((lease_owner IS NULL) = (lease_expires_at IS NULL))
);

CREATE INDEX leased_job_eligible_idx ON leased_job (workspace, created_at, id)
    WHERE state IN ('queued', 'retry_scheduled');

CREATE TABLE leased_job_interpretation (
    job_id        uuid        NOT NULL REFERENCES leased_job (id),
    number        integer     NOT NULL CHECK (number >= 1),
    fence         bigint      NOT NULL,
    model_version text        NOT NULL,
    state         text        NOT NULL,
    bundle        jsonb       NOT NULL,
    usage         jsonb,
    created_at    timestamptz NOT NULL,
    PRIMARY KEY (job_id, number)
);

CREATE TABLE leased_job_event (
    job_id         uuid        NOT NULL REFERENCES leased_job (id),
    idx            integer     NOT NULL CHECK (idx >= 0),
    kind           text        NOT NULL CHECK (kind IN (
                       'started', 'completed', 'failed', 'expired_lease')),
    fence          bigint      NOT NULL,
    worker         text,
    interpretation integer     NOT NULL,
    call           integer,
    usage          jsonb,
    refused        text,
    detail         text        NOT NULL DEFAULT '',
    at             timestamptz NOT NULL,
    PRIMARY KEY (job_id, idx)
);
