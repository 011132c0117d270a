"""`harness soak`: mixed traffic against real `vessel serve` processes under faults.

A soak admits many Runs through the HTTP surface of one or more Vessels on
one PostgreSQL, while it SIGKILLs a Vessel every few seconds (and boots a
replacement), restarts PostgreSQL itself, and degrades the network between
the Vessels and the database with Toxiproxy. Clients retry with the same
idempotency key, an approver decides consents, an operator cancels some
Runs. When the faults stop it waits for every Run to settle and reads the
ledger: a Run admitted but absent is lost, a key with two Runs (or a Run
with two terminal Steps) is duplicated, a Run still open is stuck. The
report gives those counts, failures-as-lost, and how long the system took
to serve again after each fault. Any loss, duplicate, stuck Run or other
failure exits 1.

Modules: `options` (the knobs, validated), `workload` (the seeded mix),
`fleet` (the Vessel processes), `clients` (admission, approver, operator),
`chaos` (kills, PostgreSQL restarts, toxics, recovery probes), `tally`
(the verdict over the ledger), `runner` (the whole soak).
"""

from harness.soak.options import SoakOptions, SoakUsageError
from harness.soak.runner import run_soak

__all__ = ["SoakOptions", "SoakUsageError", "run_soak"]
