-- Step rows: a Run's lifecycle events in writer order. Step evidence is
-- best effort and written by an asynchronous tee, so a row does not require
-- its Run to exist (the memory ledger accepts the same).

CREATE TABLE run_step (
    run_id     uuid        NOT NULL,
    idx        integer     NOT NULL CHECK (idx >= 0),
    seq        integer     NOT NULL CHECK (seq >= 0),
    kind       text        NOT NULL,
    data       jsonb       NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (run_id, idx)
);
