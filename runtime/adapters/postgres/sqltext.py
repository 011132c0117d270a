"""Render composed SQL once, at import, instead of on every execution.

psycopg turns a `sql.Composed` into bytes on each `execute` (about 0.1-0.2 ms
of client CPU for a statement with a long column list, measured on this
machine), while a plain `sql.SQL` costs next to nothing. The ledger's
statements are constants, so each module composes them readably and then
calls `render_once(globals())`, which replaces every module-level
`sql.Composed` with the identical `sql.SQL` text (issue 17, client CPU).
"""

from __future__ import annotations

from typing import Any

from psycopg import sql


def rendered(query: sql.Composed) -> sql.SQL:
    """The same statement as one `sql.SQL`: identifiers quoted, placeholders kept."""
    return sql.SQL(query.as_string(None))


def render_once(namespace: dict[str, Any]) -> None:
    """Replace every `sql.Composed` value in a module namespace by its rendering."""
    for name, value in list(namespace.items()):
        if isinstance(value, sql.Composed) and not name.startswith("_"):
            namespace[name] = rendered(value)
