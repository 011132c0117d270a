"""Our small graph runner and its checkpoint format (seed 003, DESIGN section 3).

pydantic-graph 2.x no longer persists snapshots, so the runtime owns the
format: a Run-keyed history of NodeSnapshot and EndSnapshot with the status
lifecycle created -> pending -> running -> success | error.
"""
