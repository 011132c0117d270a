"""Invariants of delivery records and admission content (issue M9).

Seed 000_81a5c720b14d934a.txt, "Admission and exact claim" and
"Cancellation, mutation, and recovery": a delivery moves forward only
(HELD -> PENDING -> PUBLISHED -> CLAIMED -> SETTLED, FAILED from any open
state) and a closed one never reopens; PUBLISHED records an acknowledged
broker job of exactly that hop key; a hop key whose job has finished is
never published again once a fresh sequence exists; an
idempotency key returns its Run only for the very content it admitted.

Like the rest of the checker these read only durable records, the broker's
own books and the trace. Each check is a named function so that other
checker work can move around them; violations go through `Checker.fail`.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any
from uuid import UUID

from runtime.models import DeliveryState, Intent, RunDelivery

if TYPE_CHECKING:
    from types import FrameType

    from sim.checker import Checker

S = DeliveryState
FORWARD: dict[DeliveryState, frozenset[DeliveryState]] = {
    S.HELD: frozenset({S.PENDING, S.FAILED}),
    S.PENDING: frozenset({S.PUBLISHED, S.CLAIMED, S.FAILED}),
    S.PUBLISHED: frozenset({S.CLAIMED, S.FAILED}),
    S.CLAIMED: frozenset({S.SETTLED, S.FAILED}),
    S.SETTLED: frozenset(),
    S.FAILED: frozenset(),
}
"""Every state a delivery may move to next; closed states go nowhere."""

CONTENT_FIELDS = ("pattern", "prompt", "source", "sigil", "scopes", "content", "session",
                  "priority")
"""What an idempotent replay must match, as the simulated client sees it: computed
here, independently of `Intent.fingerprint`, so a fingerprint that forgets a field
cannot hide its own bug."""


def content_digest(intent: Intent) -> str:
    material = {name: getattr(intent, name) for name in CONTENT_FIELDS}
    material["scopes"] = list(intent.scopes)
    blob = json.dumps(material, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def _brief(d: RunDelivery | None) -> dict[str, Any] | None:
    if d is None:
        return None
    return {"key": d.key, "state": d.state.value, "boot": d.claimed_boot}


def delivery_moves_forward(checker: Checker, prev: RunDelivery | None, d: RunDelivery) -> None:
    """`delivery_never_reopens`: a new delivery starts HELD or PENDING; afterwards it
    only moves forward, and a closed (SETTLED, FAILED) one never changes state again."""
    if prev is None:
        if d.state not in (S.HELD, S.PENDING):
            checker.fail("delivery_never_reopens", f"delivery {d.key} was born {d.state.value}",
                         delivery=_brief(d))
        return
    if prev.state is d.state or d.state in FORWARD[prev.state]:
        return
    checker.fail("delivery_never_reopens", f"delivery {d.key} went {prev.state.value} -> "
                 f"{d.state.value}", before=_brief(prev), after=_brief(d))


def held_released_by_hook(checker: Checker, prev: RunDelivery | None, d: RunDelivery) -> None:
    """`held_released_by_hook`: a HELD delivery becomes PENDING only once the caller's
    retention hook for its Run has completed (the client records each completion)."""
    if prev is None or prev.state is not S.HELD or d.state is not S.PENDING:
        return
    run = str(d.run_id)
    if not any(rec["data"].get("run") == run
               for rec in checker.world.trace.records("retain.done")):
        checker.fail("held_released_by_hook", f"delivery {d.key} released HELD -> PENDING "
                     "before its retention hook completed", delivery=_brief(d))


def published_has_job(checker: Checker, prev: RunDelivery | None, d: RunDelivery) -> None:
    """`published_has_job`: PUBLISHED is written only once the broker holds a job of
    exactly that hop key (its acknowledgement, or a probe that found it)."""
    if d.state is not S.PUBLISHED or (prev is not None and prev.state is S.PUBLISHED):
        return
    job = checker.world.broker.jobs.get(d.key)
    if job is None:
        checker.fail("published_has_job", f"delivery {d.key} marked PUBLISHED while the broker "
                     "has no job of that key", delivery=_brief(d))
    elif (job.info.run_id, job.info.seq) != (d.run_id, d.seq):
        checker.fail("published_has_job", f"delivery {d.key} marked PUBLISHED on a job of other "
                     "work", delivery=_brief(d))


def publish_names_current_generation(checker: Checker, key: str, run_id: UUID,
                                     seq: int) -> None:
    """`fresh_key_new_job`: a publish is issued for the Run's current sequence only. Once
    rotation or a return allocated a fresh sequence, publishing the superseded key (which
    the broker would deduplicate against its finished job) leaves the new generation
    without a job. Checked when the publish is issued, so a publish still in flight that
    lands after a rotation is not mistaken for one."""
    run = checker.world.ledger.run_table.get(run_id)
    if run is not None and run.seq > seq:
        checker.fail("fresh_key_new_job", f"hop key {key} published while the Run is at "
                     f"sequence {run.seq}", key=key)


PUBLISHABLE = frozenset({S.PENDING, S.PUBLISHED})
"""What a publisher may hand the broker: a PENDING hop, or a PUBLISHED one whose job
the relay found missing."""


def publish_open_hop(checker: Checker, key: str, caller: FrameType | None) -> None:
    """`publish_open_hop`: the engine's publish is handed a delivery its caller read
    PENDING (or PUBLISHED); one read CLAIMED, HELD or closed is only observed, never
    published again (an admission that raced a worker to its own hop survived
    mutation, M9). Reads the delivery in the `RunEngine.publish` frame (through the
    fault proxies' wrappers), as it was when it called the broker."""
    for _ in range(4):
        if caller is None or (caller.f_code.co_name == "publish"
                              and isinstance(caller.f_locals.get("delivery"), RunDelivery)):
            break
        caller = caller.f_back
    if caller is None:
        return
    delivery = caller.f_locals["delivery"]
    if delivery.state not in PUBLISHABLE:
        checker.fail("publish_open_hop", f"hop key {key} published from a delivery its "
                     f"publisher read {delivery.state.value}", key=key)


def replay_matches_content(checker: Checker) -> None:
    """`idempotent_admission`, by content: every admission that returned one Run
    carried the same content (by the client's own digest)."""
    seen: dict[str, tuple[str, str | None]] = {}
    for rec in checker.world.trace.records("submit.result"):
        if rec["event"] != "submit.result":
            continue
        data = rec["data"]
        digest = data.get("content")
        if data["outcome"] != "admitted" or not data.get("run_id") or digest is None:
            continue
        first = seen.setdefault(data["run_id"], (digest, data.get("key")))
        if first[0] != digest:
            checker.fail("idempotent_admission", f"key {data.get('key')} returned Run "
                         f"{data['run_id']} for content other than it admitted",
                         key=data.get("key"))
    refused_own_content(checker, {run_id: first[0] for run_id, first in seen.items()})


def refused_own_content(checker: Checker, admitted: dict[str, str]) -> None:
    """`idempotent_admission`, the other way: a replay refused as a conflict carried
    content other than the Run it was refused against (by the client's own digest,
    whatever `Intent.fingerprint` makes of it: the same content in another key order
    is the same content)."""
    for rec in checker.world.trace.records("submit.result"):
        if rec["event"] != "submit.result":
            continue
        data = rec["data"]
        if data["outcome"] != "IdempotencyConflict" or not data.get("run_id"):
            continue
        if admitted.get(data["run_id"]) == data.get("content"):
            checker.fail("idempotent_admission", f"key {data.get('key')} refused its own "
                         f"content (Run {data['run_id']})", key=data.get("key"))
