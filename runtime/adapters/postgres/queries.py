"""The SQL of the PostgreSQL ledger, composed once at import.

Lock discipline (what makes each ledger method behave as one atomic step):
a method that reads or writes more than one row of a Run locks the Run row
first (`FOR UPDATE`), then the rows it decides from; a method that writes
only a delivery locks only that row. So two transactions on one Run queue on
its Run row and never wait on each other in a cycle. Every write is also
conditional on the state it was decided from (`WHERE status = ... AND
seq = ...`), so a write can never apply to a row that moved on. No statement
calls now(): the caller's Clock supplies every timestamp.
"""

from __future__ import annotations

from typing import LiteralString

from psycopg import sql

from runtime.adapters.open_run import OPEN_STATUSES
from runtime.adapters.postgres.rows import DELIVERY_COLUMNS, RUN_COLUMNS, STEP_COLUMNS
from runtime.adapters.postgres.sqltext import render_once
from runtime.adapters.settle_rule import SETTLEABLE_STATUSES
from runtime.events.model import TERMINAL_KINDS
from runtime.models import TERMINAL_STATUSES, DeliveryState

STEP_LOCK_NAMESPACE = 0x5354
"""First key of the two-key advisory lock that orders Step appends of one Run."""

TERMINAL = [s.value for s in sorted(TERMINAL_STATUSES)]
CLAIMABLE = [DeliveryState.PENDING.value, DeliveryState.PUBLISHED.value]
ORPHANABLE = [s.value for s in OPEN_STATUSES]
SETTLEABLE = [s.value for s in SETTLEABLE_STATUSES]
"""settle_rule's statuses, repeated by SETTLE_PAIR's own condition."""


def _cols(columns: tuple[str, ...]) -> sql.Composed:
    return sql.SQL(", ").join(sql.Identifier(c) for c in columns)


def _prefixed(columns: tuple[str, ...], alias: str, prefix: str) -> sql.Composed:
    return sql.SQL(", ").join(
        sql.SQL("{} AS {}").format(sql.Identifier(alias, c), sql.Identifier(prefix + c))
        for c in columns
    )


def _values(columns: tuple[str, ...]) -> sql.Composed:
    return sql.SQL(", ").join(sql.Placeholder(c) for c in columns)


RUN = _cols(RUN_COLUMNS)
DELIVERY = _cols(DELIVERY_COLUMNS)
STEP = _cols(STEP_COLUMNS)
DELIVERY_PREFIX = "d_"

INSERT_DELIVERY = sql.SQL(
    "INSERT INTO run_delivery ({cols}) VALUES ({vals}) RETURNING {cols}"
).format(cols=DELIVERY, vals=_values(DELIVERY_COLUMNS))

CURRENT_PAIR = sql.SQL(
    "SELECT {run}, {delivery} FROM run r "
    "JOIN run_delivery d ON d.run_id = r.id AND d.seq = r.seq WHERE r.id = %(id)s"
).format(
    run=sql.SQL(", ").join(sql.Identifier("r", c) for c in RUN_COLUMNS),
    delivery=_prefixed(DELIVERY_COLUMNS, "d", DELIVERY_PREFIX),
)

# -- folded round trips (issue 17, client CPU): one statement where there were two
# or three. Each keeps the lock discipline above: the Run row is locked before the
# rows decided from (its delivery, then its Step lock), and every write stays
# conditional on the state it was decided from.

DELIVERY_TYPES = {
    "seq": "integer", "state": "text", "mode": "text", "queue": "text",
    "priority": "smallint", "held_by": "text", "claimed_boot": "text",
    "claim_token": "text", "created_at": "timestamptz", "updated_at": "timestamptz",
}
"""run_delivery's column types (migration 0002): ADMIT_PAIR inserts by SELECT,
where a parameter takes no type from its target column."""

ADMIT_PAIR = sql.SQL(
    "WITH r AS (INSERT INTO run ({run}) VALUES ({run_vals}) "
    "ON CONFLICT (id) DO NOTHING RETURNING id) "
    "INSERT INTO run_delivery ({delivery}) SELECT r.id, {delivery_vals} FROM r "
    "RETURNING {delivery}"
).format(
    run=RUN,
    run_vals=_values(RUN_COLUMNS),
    delivery=DELIVERY,
    delivery_vals=sql.SQL(", ").join(
        sql.SQL("{}::" + DELIVERY_TYPES[c]).format(sql.Placeholder(DELIVERY_PREFIX + c))
        for c in DELIVERY_COLUMNS[1:]
    ),
)
"""The Run and its first delivery in one statement; no row when the id is admitted
already (the Run insert did nothing, so neither does the delivery's). Delivery
parameters carry DELIVERY_PREFIX: the Run's own share names (seq, queue, ...)."""

assert DELIVERY_COLUMNS[0] == "run_id"

_PAIR_SELECT = sql.SQL("{run}, {delivery}").format(
    run=sql.SQL(", ").join(sql.Identifier("r", c) for c in RUN_COLUMNS),
    delivery=_prefixed(DELIVERY_COLUMNS, "d", DELIVERY_PREFIX),
)

_LOCK_PAIR = (
    "WITH r AS MATERIALIZED (SELECT {run_cols} FROM run WHERE id = %(run_id)s FOR UPDATE) "
    "SELECT {pair}{extra} FROM r LEFT JOIN LATERAL (SELECT {delivery_cols} FROM run_delivery "
    "WHERE run_id = r.id AND seq = %(seq)s FOR UPDATE) d ON true"
)

LOCK_PAIR = sql.SQL(_LOCK_PAIR).format(
    run_cols=RUN, pair=_PAIR_SELECT, extra=sql.SQL(""), delivery_cols=DELIVERY
)
"""LOCK_RUN then LOCK_DELIVERY in one statement: the materialized CTE locks the Run
row before the lateral scan locks its delivery `seq` (the discipline's order). No
row when the Run does not exist (a delivery never does without it: its foreign
key); the d_ columns are NULL when the delivery does not. The delivery is read
after the Run lock was granted, at its newest committed version (FOR UPDATE under
READ COMMITTED); a delivery inserted while this statement waited is not seen, but
every caller names a generation that was committed before it asked."""

LOCK_PAIR_AND_STEPS = sql.SQL(_LOCK_PAIR).format(
    run_cols=RUN,
    pair=_PAIR_SELECT,
    extra=sql.SQL(", pg_advisory_xact_lock(%(ns)s, hashtext(r.id::text)) AS step_lock"),
    delivery_cols=DELIVERY,
)
"""LOCK_PAIR, then the Run's Step lock (LOCK_STEPS_OF_RUN's key), in that order:
settle_run's lock prefix when it carries Steps."""

PUBLISH_PAIR = sql.SQL(
    "WITH r AS MATERIALIZED (SELECT id, status, seq FROM run WHERE id = %(run_id)s FOR UPDATE), "
    "d AS MATERIALIZED (SELECT x.* FROM r, LATERAL (SELECT {delivery} FROM run_delivery "
    "WHERE run_id = r.id AND seq = %(seq)s FOR UPDATE) x), "
    "u AS (UPDATE run_delivery SET state = 'PUBLISHED', updated_at = %(now)s "
    "WHERE run_id = %(run_id)s AND seq = %(seq)s AND state || '' = 'PENDING' "
    "AND EXISTS (SELECT 1 FROM d) "
    "AND EXISTS (SELECT 1 FROM r WHERE r.status = 'QUEUED' AND r.seq = %(seq)s) "
    "RETURNING {delivery}) "
    "SELECT * FROM u UNION ALL SELECT * FROM d WHERE NOT EXISTS (SELECT 1 FROM u)"
).format(delivery=DELIVERY)
"""mark_published as one autocommit statement (was a transaction of LOCK_PAIR and
its own MARK_PUBLISHED: four round trips). r locks the Run row, then d its delivery `seq`
(d scans from r), both before u's scan: u's conditions on them are one-time
filters, evaluated first. u moves the delivery PENDING -> PUBLISHED only while the
Run is QUEUED at that sequence (else the acknowledgement lost to a cancellation and
the delivery stays PENDING); the answer is u's row, else the delivery as locked,
else no row (no Run, so no delivery: its foreign key). A version committed while
r waited is re-checked by u (READ COMMITTED's re-check of an updated row)."""

CLAIM_ONE = sql.SQL(
    "WITH r AS MATERIALIZED (SELECT {run} FROM run WHERE id = %(run_id)s FOR UPDATE), "
    "d AS MATERIALIZED (SELECT x.* FROM r, LATERAL (SELECT {delivery} FROM run_delivery "
    "WHERE run_id = r.id AND seq = %(seq)s FOR UPDATE) x), "
    "ok AS MATERIALIZED (SELECT 1 FROM r, d WHERE r.status = 'QUEUED' AND r.seq = %(seq)s "
    "AND d.state = ANY(%(claimable)s)), "
    "ur AS (UPDATE run SET status = 'RUNNING', started_at = coalesce(started_at, %(now)s), "
    "updated_at = %(now)s "
    "WHERE id = %(run_id)s AND seq = %(seq)s AND status || '' = 'QUEUED' "
    "AND EXISTS (SELECT 1 FROM ok) RETURNING {run}), "
    "ud AS (UPDATE run_delivery SET state = 'CLAIMED', claimed_boot = %(boot_id)s, "
    "claim_token = %(token)s, updated_at = %(now)s "
    "WHERE run_id = %(run_id)s AND seq = %(seq)s AND state || '' = ANY(%(claimable)s) "
    "AND EXISTS (SELECT 1 FROM ur) RETURNING {delivery}) "
    "SELECT true AS claimed_now, {pair}, 0 AS discipline FROM ur AS r, ud AS d "
    "UNION ALL "
    "SELECT false, {pair}, CASE WHEN EXISTS (SELECT 1 FROM ur) "
    "THEN ('lock discipline broken: claim of run ' || r.id::text)::integer ELSE 0 END "
    "FROM r LEFT JOIN d ON true WHERE NOT EXISTS (SELECT 1 FROM ud)"
).format(run=RUN, delivery=DELIVERY, pair=_PAIR_SELECT)
"""claim_delivery as one autocommit statement (was a transaction of LOCK_PAIR, the
Python checks and an UPDATE of both rows: four round trips). r locks the Run row, then d its
delivery `seq` (d scans from r); ok is the claim's condition on the locked rows (the
Run QUEUED at `seq`, the delivery PENDING or PUBLISHED), a one-time filter of ur, so
ur's scan starts only after both locks were granted; ud claims the delivery only
once ur has moved the Run. The answer: the claimed pair (`claimed_now`), else the
pair as locked (the caller tells its own earlier claim by the token), else no row
(no Run). Were the Run moved without its delivery (a broken lock discipline), the
`discipline` column's cast fails and the statement, so its one transaction, rolls
back, as LockDisciplineBroken rolled the transaction back."""

_SETTLE_RUN_SET = (
    "UPDATE run SET status = %(status)s, result = %(result)s, error = %(error)s, "
    "updated_at = %(now)s, terminal_step = terminal_step OR {paid} "
    "WHERE id = %(run_id)s AND seq = %(seq)s AND status || '' = ANY(%(settleable)s) "
    "RETURNING {run}"
)
_SETTLE_DELIVERY_SET = (
    "UPDATE run_delivery SET state = 'SETTLED', updated_at = %(now)s "
    "WHERE run_id = %(run_id)s AND seq = %(seq)s AND state || '' = 'CLAIMED' RETURNING 1"
)

SETTLE_PAIR = sql.SQL(
    "WITH r AS (" + _SETTLE_RUN_SET + "), d AS (" + _SETTLE_DELIVERY_SET + ") "
    "SELECT r.*, (SELECT count(*) FROM d) AS delivery_settled FROM r"
).format(paid=sql.SQL("false"), run=RUN)
"""The Run settled and its delivery SETTLED in one statement, under LOCK_PAIR's locks."""

SETTLE_STEPS_PAIR = sql.SQL(
    "WITH s AS (INSERT INTO run_step ({step}) "
    "SELECT %(run_id)s, b.next + t.ord - 1, %(seq)s, t.kind, t.data, %(now)s "
    "FROM (SELECT coalesce(max(idx) + 1, 0) AS next, "
    "coalesce(bool_or(kind = ANY(%(terminal)s)), false) AS closed "
    "FROM run_step WHERE run_id = %(run_id)s) b, "
    "unnest(%(kinds)s::text[], %(datas)s::jsonb[]) WITH ORDINALITY AS t(kind, data, ord) "
    "WHERE NOT b.closed RETURNING kind), "
    "r AS (" + _SETTLE_RUN_SET + "), d AS (" + _SETTLE_DELIVERY_SET + ") "
    "SELECT r.*, (SELECT count(*) FROM d) AS delivery_settled FROM r"
).format(
    step=STEP,
    paid=sql.SQL("EXISTS (SELECT 1 FROM s WHERE s.kind = ANY(%(terminal)s))"),
    run=RUN,
)
"""APPEND_STEPS and SETTLE_PAIR's two updates in one statement, under
LOCK_PAIR_AND_STEPS's locks: the settlement's Steps (all or none, none once the
Run has a terminal Step) and `terminal_step` set when its terminal Step was
written by this statement (issue 17)."""

GET_RUN = sql.SQL("SELECT {cols} FROM run WHERE id = %(id)s").format(cols=RUN)
LOCK_RUN = sql.SQL("SELECT {cols} FROM run WHERE id = %(id)s FOR UPDATE").format(cols=RUN)

GET_DELIVERY = sql.SQL(
    "SELECT {cols} FROM run_delivery WHERE run_id = %(run_id)s AND seq = %(seq)s"
).format(cols=DELIVERY)
LOCK_DELIVERY = sql.SQL(
    "SELECT {cols} FROM run_delivery WHERE run_id = %(run_id)s AND seq = %(seq)s FOR UPDATE"
).format(cols=DELIVERY)
DELIVERIES_OF = sql.SQL(
    "SELECT {cols} FROM run_delivery WHERE run_id = %(run_id)s ORDER BY seq"
).format(cols=DELIVERY)

RELEASE_HELD = sql.SQL(
    "UPDATE run_delivery SET state = 'PENDING', held_by = NULL, updated_at = %(now)s "
    "WHERE run_id = %(run_id)s AND seq = %(seq)s AND state = 'HELD' RETURNING {cols}"
).format(cols=DELIVERY)


def _fail_run(cas: LiteralString) -> sql.Composed:
    """A Run FAILED for %(reason)s, only while it is in the state `cas` it was decided from."""
    return sql.SQL(
        "UPDATE run SET status = 'FAILED', error = %(reason)s, updated_at = %(now)s "
        "WHERE id = %(run_id)s AND seq = %(seq)s AND " + cas + " RETURNING {cols}"
    ).format(cols=RUN)


def _fail_delivery(cas: LiteralString) -> sql.Composed:
    """A delivery FAILED, only while it is in the state `cas` it was decided from."""
    return sql.SQL(
        "UPDATE run_delivery SET state = 'FAILED', updated_at = %(now)s "
        "WHERE run_id = %(run_id)s AND seq = %(seq)s AND " + cas + " RETURNING {cols}"
    ).format(cols=DELIVERY)


FAIL_HELD_DELIVERY = _fail_delivery("state = 'HELD'")

FAIL_QUEUED_RUN = _fail_run("status = 'QUEUED'")

# One row by its primary key, its state or status repeated as a condition: the
# condition is written `status || '' = ...`, the same test, but one that no index
# on (status, ...) or (state, ...) can serve, so the planner takes the primary key.
# Otherwise statistics taken while few Runs were QUEUED (or deliveries PENDING)
# make the status index look as cheap, and in a backlog every claim and
# mark_published walks all QUEUED Runs or PENDING deliveries (20,000 rows removed
# by filter per call, measured: benchmarks/hot_queries.py --backlog, issue 17).

SETTLE_PARKED_DELIVERY = sql.SQL(
    "UPDATE run_delivery SET state = 'SETTLED', updated_at = %(now)s "
    "WHERE run_id = %(run_id)s AND seq = %(seq)s RETURNING {cols}"
).format(cols=DELIVERY)

CLOSE_DEAD_DELIVERY = sql.SQL(
    "UPDATE run_delivery SET state = 'FAILED', updated_at = %(now)s "
    "WHERE run_id = %(run_id)s AND seq = %(seq)s AND state || '' = ANY(%(claimable)s) "
    "RETURNING {cols}"
).format(cols=DELIVERY)

ADVANCE_RUN_SEQ = sql.SQL(
    "UPDATE run SET seq = seq + 1, updated_at = %(now)s "
    "WHERE id = %(run_id)s AND seq = %(seq)s AND status || '' = 'QUEUED' RETURNING {cols}"
).format(cols=RUN)

FAIL_ORPHAN_RUN = _fail_run("status = ANY(%(orphanable)s)")

FAIL_ORPHAN_DELIVERY = _fail_delivery("claimed_boot IS DISTINCT FROM %(boot_id)s")

FAIL_ABANDONED_DELIVERY = _fail_delivery(
    "state = 'CLAIMED' AND claim_token = %(claim_token)s"
)

SESSION_LOCK_NAMESPACE = 0x5345
"""First key of the two-key advisory lock that orders admissions of one Bridge session."""

LOCK_SESSION = sql.SQL("SELECT pg_advisory_xact_lock(%(ns)s, hashtext(%(session)s::text))")
"""Serialises admissions of one session across connections: the session fence's
check and its insert run under it (issue 15, M11: several Vessels, one database)."""

READ_COMMITTED = sql.SQL("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
"""First statement of a fenced admission: its reads after LOCK_SESSION must see what
the lock's previous holder committed, even where the server's default isolation is
REPEATABLE READ (whose snapshot would predate the wait for the lock)."""

SESSION_BUSY = sql.SQL(
    "SELECT {cols} FROM run WHERE session = %(session)s AND id <> %(id)s "
    "AND status <> ALL(%(terminal)s) ORDER BY created_at, id LIMIT 1"
).format(cols=RUN)

RUNS_IN_SESSION = sql.SQL(
    "SELECT {cols} FROM run WHERE session = %(session)s AND status <> ALL(%(terminal)s) "
    "ORDER BY created_at, id LIMIT %(limit)s"
).format(cols=RUN)

PAGE_RUNS_FIRST = sql.SQL(
    "SELECT {cols} FROM run WHERE status = ANY(%(statuses)s) "
    "ORDER BY updated_at, id LIMIT %(limit)s"
).format(cols=RUN)

PAGE_RUNS_AFTER = sql.SQL(
    "SELECT {cols} FROM run WHERE status = ANY(%(statuses)s) "
    "AND (updated_at, id) > (%(after_at)s, %(after_id)s) "
    "ORDER BY updated_at, id LIMIT %(limit)s"
).format(cols=RUN)

# -- startup debts (migration 0009): partial indexes hold only the debtors ----------

_DEBT_ORDER = (
    "AND (%(after_at)s::timestamptz IS NULL OR (updated_at, id) > (%(after_at)s, %(after_id)s)) "
    "ORDER BY updated_at, id LIMIT %(limit)s"
)

EVIDENCE_DEBTS = sql.SQL(
    "SELECT {cols} FROM run WHERE NOT terminal_step "
    "AND status IN ('CANCELLED', 'DONE', 'FAILED') " + _DEBT_ORDER
).format(cols=RUN)
"""Terminal Runs without a terminal Step; the predicate is run_evidence_debt_idx's."""

LATE_FENCE_DEBTS = sql.SQL(
    "SELECT {cols} FROM run WHERE late_fence_owed " + _DEBT_ORDER
).format(cols=RUN)
"""CANCELLED Runs whose late hop job is not yet probed (run_late_fence_debt_idx)."""

OWE_LATE_FENCE = sql.SQL("UPDATE run SET late_fence_owed = true WHERE id = %(run_id)s")

SETTLE_LATE_FENCE = sql.SQL(
    "UPDATE run SET late_fence_owed = false WHERE id = %(run_id)s AND late_fence_owed "
    "RETURNING id"
)

MARK_TERMINAL_STEP = sql.SQL(
    "UPDATE run SET terminal_step = true WHERE id = %(run_id)s AND NOT terminal_step"
)
"""In append_step's transaction, for a terminal kind: the Run's evidence is paid."""

LOCK_STEPS_OF_RUN = sql.SQL(
    "SELECT pg_advisory_xact_lock(%(ns)s, hashtext(%(run_id)s::text)) "
    "FROM run WHERE id = %(run_id)s"
)
"""Serialises every Step write of one Run across connections: index allocation and
the one-terminal-Step check below both read under it. No row when the Run does not
exist: a Step names an admitted Run, and the existence check shares the lock's round
trip (migration 0003 predates this rule and has no foreign key)."""

TERMINAL_STEP_KINDS = sorted(TERMINAL_KINDS)

TERMINAL_STEP_OF = sql.SQL(
    "SELECT {cols} FROM run_step WHERE run_id = %(run_id)s AND kind = ANY(%(terminal)s) "
    "ORDER BY idx LIMIT 1"
).format(cols=STEP)
"""The Run's terminal Step, if written: read under LOCK_STEPS_OF_RUN, so a second
terminal Step is refused atomically whichever process writes it (issue 15, M11)."""

APPEND_STEP = sql.SQL(
    "INSERT INTO run_step ({cols}) "
    "SELECT %(run_id)s, coalesce(max(idx) + 1, 0), %(seq)s, %(kind)s, %(data)s, %(now)s "
    "FROM run_step WHERE run_id = %(run_id)s "
    "HAVING NOT (coalesce(bool_or(kind = ANY(%(terminal)s)), false)) RETURNING {cols}"
).format(cols=STEP)
"""No row once the Run has a terminal Step: it closes the log (read under the Step lock)."""

APPEND_STEPS = sql.SQL(
    "INSERT INTO run_step ({cols}) "
    "SELECT %(run_id)s, b.next + t.ord - 1, %(seq)s, t.kind, t.data, %(now)s "
    "FROM (SELECT coalesce(max(idx) + 1, 0) AS next, "
    "coalesce(bool_or(kind = ANY(%(terminal)s)), false) AS closed "
    "FROM run_step WHERE run_id = %(run_id)s) b, "
    "unnest(%(kinds)s::text[], %(datas)s::jsonb[]) WITH ORDINALITY AS t(kind, data, ord) "
    "WHERE NOT b.closed RETURNING {cols}"
).format(cols=STEP)
"""One group commit of the Step writer: consecutive indexes, in the given order."""

STEPS_OF = sql.SQL("SELECT {cols} FROM run_step WHERE run_id = %(run_id)s ORDER BY idx").format(
    cols=STEP
)

SNAPSHOT = sql.SQL("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
DUMP_RUNS = sql.SQL("SELECT {cols} FROM run ORDER BY created_at, id").format(cols=RUN)
DUMP_DELIVERIES = sql.SQL("SELECT {cols} FROM run_delivery ORDER BY run_id, seq").format(
    cols=DELIVERY
)
DUMP_STEPS = sql.SQL("SELECT {cols} FROM run_step ORDER BY run_id, idx").format(cols=STEP)

render_once(globals())  # last: every statement above is sent as plain text (sqltext)
