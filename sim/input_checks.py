"""Bad input is refused with a clear error (seed 004 "Durable states", seed 000
"Service job attempts").

The `bad_input` scenario's client sends, now and then, values just past the
bounds the records and stores admit, and traces how each call was answered
(`bad_input.call`). A record decoded from a client's outbox with a field
missing or empty must fail validation naming that field (a ValidationError,
not a KeyError out of a validator, nor a record the store would take); a
store call out of bounds must raise some error. That nothing of such a call
was recorded is judged elsewhere: `attempt_log_numbered` (no attempt event
names a fence no claim reached) and `usage_never_fabricated`. Read from
the trace once the world is quiescent:
no trace changes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sim.checker import Checker

INVARIANTS = (
    ("bad_input_refused", "a record or a store call carrying a value past its bound (an "
     "empty workspace, an interpretation number 0, a missing binding or request, a binding "
     "with an empty name, fence -1, a negative retry base) "
     "is refused with an error; "
     "a malformed record fails validation naming the bad field",
     "seed 004 'Durable states' (a receipt preserves evidence and a job of an authorised "
     "workspace), seed 000 'Service job attempts' (an attempt record seals its request "
     "and binding)"),
)


def final(checker: Checker) -> None:
    for rec in checker.world.trace.records("bad_input.call"):
        if rec["event"] != "bad_input.call":
            continue
        data = rec["data"]
        outcome, target = data["outcome"], data["target"]
        if outcome == "accepted":
            checker.fail("bad_input_refused", f"the client's bad {target} was accepted",
                         call=data)
        elif data["expect"] == "invalid" and (
                outcome != "ValidationError" or not set(data["fields"]) <= set(data["named"])):
            checker.fail("bad_input_refused", f"the client's bad {target} (without "
                         f"{', '.join(data['fields'])}) was answered {outcome} naming "
                         f"{data['named'] or 'nothing'}", call=data)
