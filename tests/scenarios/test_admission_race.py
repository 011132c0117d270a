"""Scenario admission_race (issue M9): racing admissions of one scoped key, in one
Vessel and as two Vessels on one ledger, end as seed 000's admission rules say."""

from __future__ import annotations

import json
from collections import Counter

from sim.kernel import run_simulation


def test_racing_submissions_of_one_key_admit_one_run_and_refuse_other_content() -> None:
    result = run_simulation(1, "admission_race", "swarm")
    assert result.boots >= 2  # two Vessels serve the one database
    assert result.ok, (result.invariant, result.violation)
    outcomes: Counter[str] = Counter()
    instants: Counter[tuple[float, str]] = Counter()
    for line in result.trace_lines:
        if '"event":"submit.result"' in line:
            record = json.loads(line)
            outcomes[record["data"]["outcome"]] += 1
            instants[(record["t"], record["data"]["key"])] += 1
    assert outcomes["admitted"] and outcomes["IdempotencyConflict"]
    assert max(instants.values()) >= 3  # several clients at the same virtual instant
    assert result.ledger is not None
    keys = Counter(r.idempotency_key for r in result.ledger.runs)
    assert max(keys.values()) == 1


def test_an_admission_upsert_is_caught_when_two_vessels_race_a_key() -> None:
    # Seeds re-pinned when the terminal Step joined settle_run (86549a5) changed traces.
    assert run_simulation(2, "admission_race", "swarm").ok
    result = run_simulation(2, "admission_race", "swarm", break_name="admission_key_upserted")
    assert result.invariant == "idempotent_admission", (result.invariant, result.violation)


def test_a_racing_vessel_taking_an_equal_run_for_its_own_commit_is_caught() -> None:
    result = run_simulation(3, "admission_race", "swarm",
                            break_name="racing_admission_as_creator")
    assert result.invariant == "failure_has_cause", (result.invariant, result.violation)
    assert result.violation is not None and "AssertionError" in result.violation.message


def test_a_held_admission_replayed_through_the_other_vessel_without_its_hook_is_refused() -> None:
    result = run_simulation(8, "admission_race", "swarm")
    assert result.ok, (result.invariant, result.violation)
    refused = [json.loads(line)["data"] for line in result.trace_lines
               if '"outcome":"HeldWithoutOwner"' in line]
    assert refused and all(r["held"] is False and r["run_id"] for r in refused)


def test_a_second_creator_releases_a_held_admission_its_twin_already_claimed() -> None:
    """Two submissions of one content at one instant both find their own records and
    both hold the admission; chatty hops keep the claim about 2 s, so the later hook
    releases a delivery the earlier one's hop has claimed (engine.submit must then only
    observe it: publish_open_hop). Seed 3 is the first to show it."""
    result = run_simulation(3, "admission_race", "swarm")
    assert result.ok, (result.invariant, result.violation)
    claimed: set[str] = set()
    late = []
    for line in result.trace_lines:
        record = json.loads(line)
        run = record["data"].get("run_id")
        if record["event"] == "tx.claim_delivery":
            claimed.add(run)
        elif record["event"] == "tx.settle_run":
            claimed.discard(run)
        elif record["event"] == "tx.release_held" and run in claimed:
            late.append(run)
    assert late, "no admission released a delivery while it was claimed"
