"""The SQL of durable waits: checkpoints, consents, agent jobs, run transitions.

The lock rule of `queries` holds here too: a transaction that writes more than
one row locks the Run row first, so two of them on one Run queue on that row
and cannot deadlock; decisions on a consent and reports of an agent job lock
only that one row. Timestamps are parameters.
"""

from __future__ import annotations

from psycopg import sql

from runtime.adapters.postgres.queries import RUN
from runtime.adapters.postgres.rows import CHECKPOINT_COLUMNS, CONSENT_COLUMNS, JOB_COLUMNS
from runtime.adapters.postgres.sqltext import render_once


def _cols(columns: tuple[str, ...]) -> sql.Composed:
    return sql.SQL(", ").join(sql.Identifier(c) for c in columns)


def _values(columns: tuple[str, ...]) -> sql.Composed:
    return sql.SQL(", ").join(sql.Placeholder(c) for c in columns)


CHECKPOINT = _cols(CHECKPOINT_COLUMNS)
CONSENT = _cols(CONSENT_COLUMNS)
JOB = _cols(JOB_COLUMNS)

# -- checkpoints ---------------------------------------------------------------

SAVE_CHECKPOINT = sql.SQL(
    "INSERT INTO run_checkpoint ({cols}) VALUES ({vals}) ON CONFLICT (run_id) DO UPDATE SET "
    "seq = EXCLUDED.seq, document = EXCLUDED.document, consent_id = EXCLUDED.consent_id, "
    "agent_job_id = EXCLUDED.agent_job_id, service_attempt_id = EXCLUDED.service_attempt_id, "
    "updated_at = EXCLUDED.updated_at"
).format(cols=CHECKPOINT, vals=_values(CHECKPOINT_COLUMNS))

GET_CHECKPOINT = sql.SQL("SELECT {cols} FROM run_checkpoint WHERE run_id = %(run_id)s").format(
    cols=CHECKPOINT
)

DELETE_CHECKPOINT = sql.SQL(
    "WITH r AS (SELECT id FROM run WHERE id = %(run_id)s AND status = ANY(%(terminal)s)), "
    "d AS (DELETE FROM run_checkpoint c USING r WHERE c.run_id = r.id) "
    "SELECT count(*) AS terminal FROM r"
)
"""Delete a terminal Run's checkpoint in one statement, without locking the Run.

No lock is needed: a checkpoint is saved only under the Run's row lock while
it is live, and the settlement that made it terminal took that lock too, so
a statement that sees the Run terminal also sees every checkpoint it will
ever have. A Run that never checkpointed (most of them) costs one read: no
row is locked or deleted, so no transaction id is used and nothing is logged.
"""

CHECKPOINT_DEBTS = sql.SQL(
    "SELECT c.run_id FROM run_checkpoint c JOIN run r ON r.id = c.run_id "
    "WHERE r.status = ANY(%(terminal)s) AND (%(after)s::uuid IS NULL OR c.run_id > %(after)s) "
    "ORDER BY c.run_id LIMIT %(limit)s"
)
"""Terminal Runs whose checkpoint is still there: best-effort cleanup owed."""

# -- consents ------------------------------------------------------------------

GET_CONSENT = sql.SQL("SELECT {cols} FROM consent WHERE id = %(id)s").format(cols=CONSENT)
LOCK_CONSENT = sql.SQL("SELECT {cols} FROM consent WHERE id = %(id)s FOR UPDATE").format(
    cols=CONSENT
)
INSERT_CONSENT = sql.SQL(
    "INSERT INTO consent ({cols}) VALUES ({vals}) ON CONFLICT (id) DO NOTHING RETURNING {cols}"
).format(cols=CONSENT, vals=_values(CONSENT_COLUMNS))
CONSENTS_OF = sql.SQL(
    "SELECT {cols} FROM consent WHERE run_id = %(run_id)s ORDER BY created_at, id"
).format(cols=CONSENT)
DECIDE_CONSENT = sql.SQL(
    "UPDATE consent SET status = %(status)s, decided_by = %(principal)s, decided_at = %(now)s "
    "WHERE id = %(id)s AND status = 'PENDING' RETURNING {cols}"
).format(cols=CONSENT)
CANCEL_CONSENT = sql.SQL(
    "UPDATE consent SET status = 'CANCELLED' WHERE id = %(id)s AND status = 'PENDING' "
    "RETURNING {cols}"
).format(cols=CONSENT)
CANCEL_PENDING_CONSENTS_OF_RUN = sql.SQL(
    "UPDATE consent SET status = 'CANCELLED' WHERE run_id = %(run_id)s AND status = 'PENDING'"
)

# -- agent jobs ------------------------------------------------------------------

GET_JOB = sql.SQL("SELECT {cols} FROM agent_job WHERE id = %(id)s").format(cols=JOB)
LOCK_JOB = sql.SQL("SELECT {cols} FROM agent_job WHERE id = %(id)s FOR UPDATE").format(cols=JOB)
INSERT_JOB = sql.SQL(
    "INSERT INTO agent_job ({cols}) VALUES ({vals}) ON CONFLICT (id) DO NOTHING RETURNING {cols}"
).format(cols=JOB, vals=_values(JOB_COLUMNS))
JOBS_OF = sql.SQL(
    "SELECT {cols} FROM agent_job WHERE run_id = %(run_id)s ORDER BY created_at, id"
).format(cols=JOB)
RECORD_JOB = sql.SQL(
    "UPDATE agent_job SET status = %(status)s, result = %(result)s, updated_at = %(now)s "
    "WHERE id = %(id)s AND status = %(from_status)s RETURNING {cols}"
).format(cols=JOB)

# -- run transitions -------------------------------------------------------------

MOVE_RUN = sql.SQL(
    "UPDATE run SET status = %(to_status)s, updated_at = %(now)s "
    "WHERE id = %(run_id)s AND seq = %(seq)s AND status = %(from_status)s RETURNING {cols}"
).format(cols=RUN)

PARK_FOR_CONSENT = sql.SQL(
    "UPDATE run SET status = 'AWAITING_CONSENT', consent_id = %(owner)s, updated_at = %(now)s "
    "WHERE id = %(run_id)s AND seq = %(seq)s AND status = 'RUNNING' RETURNING {cols}"
).format(cols=RUN)

PARK_FOR_DELEGATE = sql.SQL(
    "UPDATE run SET status = 'AWAITING_DELEGATE', agent_job_id = %(owner)s, "
    "updated_at = %(now)s "
    "WHERE id = %(run_id)s AND seq = %(seq)s AND status = 'RUNNING' RETURNING {cols}"
).format(cols=RUN)

PARK_FOR_SERVICE = sql.SQL(
    "UPDATE run SET status = 'AWAITING_SERVICE', service_attempt_id = %(owner)s, "
    "updated_at = %(now)s "
    "WHERE id = %(run_id)s AND seq = %(seq)s AND status = 'RUNNING' RETURNING {cols}"
).format(cols=RUN)

# The owner of a service wait, locked: only its owner Run and terminality matter here.
LOCK_OWNED_ATTEMPT = sql.SQL(
    "SELECT state FROM service_job_attempt WHERE id = %(id)s AND run_id = %(run_id)s FOR SHARE"
).format()

READMIT_RUN = sql.SQL(
    "UPDATE run SET status = 'QUEUED', seq = seq + 1, updated_at = %(now)s "
    "WHERE id = %(run_id)s AND seq = %(seq)s AND status = %(from_status)s RETURNING {cols}"
).format(cols=RUN)

CLOSE_DELIVERY = sql.SQL(
    "UPDATE run_delivery SET state = %(to_state)s, updated_at = %(now)s "
    "WHERE run_id = %(run_id)s AND seq = %(seq)s AND state = %(from_state)s"
)

# -- dump --------------------------------------------------------------------------

DUMP_CONSENTS = sql.SQL("SELECT {cols} FROM consent ORDER BY created_at, id").format(cols=CONSENT)
DUMP_AGENT_JOBS = sql.SQL("SELECT {cols} FROM agent_job ORDER BY created_at, id").format(cols=JOB)
DUMP_CHECKPOINTS = sql.SQL("SELECT {cols} FROM run_checkpoint ORDER BY run_id").format(
    cols=CHECKPOINT
)

render_once(globals())  # last: every statement above is sent as plain text (sqltext)
