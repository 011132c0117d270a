"""Regression: crashloop seed 25 (swarm) once failed `terminal_evidence_once`.

Not a runtime fault: an operator's cancel committed CANCELLED, then its
`run.cancelled` append stalled (a step_stall drawn just before heal) past the
first quiescence poll. Quiescence looked only at the worker's in-memory debts,
so the checker judged the ledger while the handler was still writing the Step.
The plan below is `harness shrink --emit-test`'s minimum of that seed; it
fails on the old quiescence and holds now that quiescence waits for every
terminal Run's Step in the ledger.
"""

from uuid import UUID

from runtime.models import RunStatus
from sim.faults.plan import FaultPlan
from sim.kernel import run_simulation

PLAN = FaultPlan.model_validate_json(
    """{
    "faults": [
        {
            "trigger": {
                "kind": "time",
                "at": 17.58
            },
            "fault": "crash",
            "amount": 0.0,
            "action": null
        },
        {
            "trigger": {
                "kind": "point",
                "point": "admit.committed",
                "nth": 5
            },
            "fault": "crash",
            "amount": 0.0,
            "action": null
        },
        {
            "trigger": {
                "kind": "time",
                "at": 78.672
            },
            "fault": "crash",
            "amount": 0.0,
            "action": null
        },
        {
            "trigger": {
                "kind": "point",
                "point": "claim.committed",
                "nth": 7
            },
            "fault": "crash",
            "amount": 0.0,
            "action": null
        },
        {
            "trigger": {
                "kind": "point",
                "point": "ledger.append_step",
                "nth": 34
            },
            "fault": "ledger_ambiguous",
            "amount": 0.0,
            "action": null
        },
        {
            "trigger": {
                "kind": "point",
                "point": "claim.committed",
                "nth": 11
            },
            "fault": "crash",
            "amount": 0.0,
            "action": null
        },
        {
            "trigger": {
                "kind": "time",
                "at": 154.695
            },
            "fault": "crash",
            "amount": 0.0,
            "action": null
        },
        {
            "trigger": {
                "kind": "point",
                "point": "settle.terminal_committed",
                "nth": 8
            },
            "fault": "crash",
            "amount": 0.0,
            "action": null
        },
        {
            "trigger": {
                "kind": "point",
                "point": "ledger.page_runs",
                "nth": 268
            },
            "fault": "ledger_outage",
            "amount": 13.15,
            "action": null
        },
        {
            "trigger": {
                "kind": "point",
                "point": "admit.committed",
                "nth": 13
            },
            "fault": "crash",
            "amount": 0.0,
            "action": null
        },
        {
            "trigger": {
                "kind": "point",
                "point": "settle.evidence_written",
                "nth": 6
            },
            "fault": "crash",
            "amount": 0.0,
            "action": null
        },
        {
            "trigger": {
                "kind": "point",
                "point": "steps.append",
                "nth": 53
            },
            "fault": "step_stall",
            "amount": 18.57,
            "action": null
        }
    ]
}"""
)


CANCELLED_RUN = UUID("59f12789-99da-5db1-ae28-6067bf4a5482")


def test_crashloop_seed_25_stalled_cancel_step_lands_before_the_check() -> None:
    result = run_simulation(25, "crashloop", "swarm", PLAN)
    assert result.ok, (result.invariant, result.violation, result.error)
    assert result.ledger is not None
    run = next(r for r in result.ledger.runs if r.id == CANCELLED_RUN)
    assert run.status is RunStatus.CANCELLED
    kinds = [s.kind for s in result.ledger.steps if s.run_id == CANCELLED_RUN]
    assert kinds.count("run.cancelled") == 1
