-- Step rows: a Run's lifecycle events in writer order. Step evidence is
-- best effort and written by an asynchronous tee. There is no foreign key:
-- the ledger refuses a Step for a Run that does not exist in the statement
-- that takes the Run's Step lock (queries.LOCK_STEPS_OF_RUN), at no extra
-- cost per row (comment only: the table is unchanged).

CREATE TABLE run_step (
    run_id     uuid        NOT NULL,
    idx        integer     NOT NULL CHECK (idx >= 0),
    seq        integer     NOT NULL CHECK (seq >= 0),
    kind       text        NOT NULL,
    data       jsonb       NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (run_id, idx)
);
