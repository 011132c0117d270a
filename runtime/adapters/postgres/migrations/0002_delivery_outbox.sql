-- requires: no-nonterminal-runs
--
-- The transactional delivery outbox: one row per exact broker hop of a Run,
-- keyed by (run_id, seq) (seed 000_81a5c720b14d934a.txt, "Admission and
-- exact claim"). Installing it over existing Runs would have to guess
-- whether each live Run's current hop was fresh or resumed, so the runner
-- refuses while any nonterminal Run exists, holding ACCESS EXCLUSIVE on run
-- through that check and this DDL.

CREATE TABLE run_delivery (
    run_id       uuid        NOT NULL REFERENCES run (id),
    seq          integer     NOT NULL CHECK (seq >= 0),
    state        text        NOT NULL CHECK (state IN (
                     'HELD', 'PENDING', 'PUBLISHED', 'CLAIMED', 'SETTLED', 'FAILED')),
    mode         text        NOT NULL CHECK (mode IN ('fresh', 'resume')),
    queue        text        NOT NULL,
    priority     smallint    NOT NULL CHECK (priority BETWEEN 0 AND 100),
    held_by      text,
    claimed_boot text,
    claim_token  text,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    PRIMARY KEY (run_id, seq)
);

-- The delivery relay looks for unpublished or unclaimed hops.
CREATE INDEX run_delivery_open_idx ON run_delivery (state, updated_at)
    WHERE state IN ('HELD', 'PENDING', 'PUBLISHED');
