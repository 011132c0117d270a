"""Invariants of the waits (runtime.stasis), read from the outcome a Run ends with.

Seed 003_9b07f1601fdd86c6.txt ("Three boundaries", "Return makes a new claim")
and seed 000_81a5c720b14d934a.txt ("Events, settlement, and waits"). Mutation
testing of `runtime/stasis` (issue M9) showed that a wait could end every Run
wrongly and still pass: a consent gate that settles every Run as a "several
approvals" bottleneck without asking anyone, a resume that refuses every
decided owner (the Runs fail, and a failure is a legal terminal state), a
verdict path that no longer re-admits its Run (the relay does, later). A
terminal Run's result is written by the Pattern from what its wait handed
it, so it says whether the wait was honest:

- `gate_outcome`: a `consent_gate` Run ends DONE as its content and its
  consents say: a round asking several approvals is a bottleneck with no
  consent asked; otherwise one consent per round, at most 3 rounds (then the
  chain-limit bottleneck), and its verdicts are its consents' decided
  statuses, in order.
- `gate_effects_follow_verdicts`: such a DONE gate applied its round's
  effect exactly in the rounds whose verdict is APPROVED (the resumed hop acts
  on the durable verdict; a flipped verdict test survived mutation, M9).
- `hardware_outcome`: a `hardware` Run is DONE with every need used, one
  convergence charge each, only when its needs fit the resume budget (8 calls,
  3 in a row for one capability); it fails "budget exhausted" exactly at the
  first need that overruns it, naming the counters; never "stasis lost",
  "invalid checkpoint", or for want of an orchestrator the world has.
- `wait_result_is_owner`: a `delegate` or `service_call` Run ends DONE with
  its own owner's successful result, or FAILED naming its own owner's
  unsuccessful end; no Run fails because its resume was refused (the owner
  CAS admitted it on that very decided or terminal owner).
- `stasis_kept`: a Run never fails as "stasis lost" or with an invalid
  checkpoint unless the storage layer misfiled its checkpoint (the
  `misfiled_stasis` scenario traces each such write): every checkpoint a
  resumed hop reads was saved by a hop of that very Run and is deleted only
  after its terminal truth, so a resume that refuses its own snapshot (a Run
  id test read backwards, M9) fails every parked Run of the world.
- `verdict_honoured`: a consent is decided only by its owner; another
  principal's verdict is refused; the owner's verdict is recorded as given
  (or refused only when the consent is cancelled or decided otherwise: a late
  contradicting verdict is refused, the first one stands), and a
  verdict that answers "decided" for a parked Run has re-admitted it unless a
  fault struck during the call.

The checker's copies of the limits are its own (`MAX_CONSENT_ROUNDS`, the
budget), so a mutant of the runtime's constants cannot move the oracle.
Nothing here draws a random number, awaits or emits: traces are unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from uuid import UUID

from runtime.models import AgentJobStatus, Consent, ConsentStatus, Run, RunStatus
from runtime.service.models import ServiceState

if TYPE_CHECKING:
    from sim.checker import Checker

INVARIANTS = (
    ("gate_outcome", "a consent_gate Run is DONE as its content and consents say: several "
     "approvals in a round end as that bottleneck with no consent asked; otherwise one "
     "consent per round up to 3 (then the chain-limit bottleneck), and the verdicts are the "
     "consents' decided statuses in order", "seed 003 'Return makes a new claim' (rounds "
     "chain, bounded to three; several approvals settle DONE with an honest bottleneck; the "
     "resumed hop reads the durable verdict)"),
    ("gate_effects_follow_verdicts", "a consent_gate Run DONE with its verdicts has applied "
     "its round-n effect (approved-n) exactly for the rounds whose verdict is APPROVED, and no "
     "other", "seed 003 'Return makes a new claim' (the resumed hop reads stored truth: it "
     "acts on the durable verdict, whichever won)"),
    ("errands_bounded", "an errands Run asked for N rounds owns at most N agent jobs and N "
     "service attempts, however it ended", "seed 003 'Return makes a new claim' (a resumed "
     "hop goes on from the durable state: the round count it reads ends the chain)"),
    ("errands_complete", "an errands Run DONE went all the rounds it asked for (N, or "
     "the Pattern's declared default of 2 when it named none): it owns exactly N agent "
     "jobs and N service attempts and answers their 2N outcomes", "seed 003 'Return makes "
     "a new claim' (a resumed hop goes on from the durable state to the end of its chain)"),
    ("hardware_outcome", "a hardware Run is DONE with every need used once only when its needs "
     "fit the resume budget (8 calls, 3 in a row); it fails 'budget exhausted' exactly at the "
     "first need that overruns it, and never as stasis lost, an invalid checkpoint or for "
     "want of an orchestrator", "seed 003 'Three boundaries'; seed 000 'Events, settlement, "
     "and waits' (the state is re-read from the checkpoint)"),
    ("wait_result_is_owner", "a delegate or service_call Run ends DONE with its own owner's "
     "successful result, or FAILED naming its own owner's unsuccessful end; a resumed hop is "
     "never refused its owner (the owner CAS admitted it on that decided or terminal owner)",
     "seed 003 'Return makes a new claim'; seed 000 'Delegated AgentJob labor', 'Service job "
     "attempts'"),
    ("stasis_kept", "a Run fails as stasis lost or with an invalid checkpoint only when the "
     "storage layer misfiled its checkpoint: a resumed hop reads the snapshot its own Run "
     "saved", "seed 003 'Return makes a new claim' (a resumed hop continues from the "
     "checkpoint; only a missing or foreign one fails it as stasis lost)"),
    ("verdict_honoured", "a consent is decided only by its owner, as the owner decided; another "
     "principal's verdict is refused, and so is a late verdict contradicting the first (which "
     "stands); the owner's verdict on a parked Run re-admits it before the call answers, "
     "unless a fault struck during the call", "seed 000 'Events, settlement, "
     "and waits' (a verdict carries its decision principal; the owner CAS re-admits)"),
)

ERRANDS_DEFAULT_ROUNDS = 2
"""The checker's copy of the rounds an errands Run goes when its content names none
(runtime/patterns/waits.py, README "The HTTP API")."""
MAX_CONSENT_ROUNDS = 3
"""The checker's copy of the approval chain limit (runtime.stasis.waits)."""
MAX_TOTAL, MAX_CONSECUTIVE = 8, 3
"""The checker's copy of the hardware resume budget (runtime.graph.budget)."""

SEVERAL_APPROVALS = "bottleneck: several approvals requested in one round; none was asked"
CHAIN_LIMIT = f"bottleneck: approval chain limit of {MAX_CONSENT_ROUNDS} rounds reached"

LOST_STASIS_ERRORS = ("stasis lost", "invalid checkpoint:")
GATE_BOUNDS = {"rounds": (0, 10), "approvals": (1, 5)}
"""The checker's copy of the consent_gate content the Pattern declares valid (rounds
asked, approvals per round): a Run of such content never fails its own decode."""
"""Failures of a resume that found no valid checkpoint of its own Run
(runtime/graph/runner.py, runtime/stasis/waits.py). "invalid checkpoint state" is not
one: the document was the Run's own, its Pattern refused the state in it."""
MISFILED = '"stasis.misfiled"'
"""The trace event of a checkpoint write the faulty storage layer misdirected."""

IMPOSSIBLE_HARDWARE_ERRORS = ("stasis lost", "invalid checkpoint",
                              "this state cannot request hardware",
                              "no orchestrator is configured")
"""Failures of a live hardware wait no simulated world produces: its checkpoint was
saved by the hop itself and every boot has an orchestrator."""


def budget_overrun(needs: list[str]) -> str | None:
    """The failure the resume budget gives `needs`, or None when they fit."""
    total = consecutive = 0
    last: str | None = None
    for capability in needs:
        run = consecutive + 1 if capability == last else 1
        if total + 1 > MAX_TOTAL or run > MAX_CONSECUTIVE:
            return (f"hardware budget exhausted for {capability!r}: {total}/{MAX_TOTAL} calls, "
                    f"{consecutive}/{MAX_CONSECUTIVE} in a row")
        total, consecutive, last = total + 1, run, capability
    return None


def _faulted(lines: list[str]) -> bool:
    return any('"fault.fired"' in line or '"boot.crash"' in line for line in lines)


class StasisChecks:
    def __init__(self, checker: Checker) -> None:
        self.checker = checker

    def _consents_of(self, run: Run) -> list[Consent]:
        table = self.checker.world.ledger.consent_table
        return sorted((c for c in table.values() if c.run_id == run.id),
                      key=lambda c: (c.seq, c.created_at, c.id))

    # -- as a Run ends ----------------------------------------------------------------

    def run_done(self, run: Run) -> None:
        if run.pattern == "consent_gate":
            self._gate_done(run)
        elif run.pattern == "hardware":
            self._hardware_done(run)
        elif run.pattern == "delegate":
            self._delegate_done(run)
        elif run.pattern == "service_call":
            self._service_done(run)

    def run_failed(self, run: Run) -> None:
        error = run.error or ""
        if error.startswith("ResumeRefused"):
            self.checker.fail("wait_result_is_owner", f"Run {run.id} failed as its resume was "
                              f"refused: {error[:160]}", run=str(run.id))
        if error.startswith(LOST_STASIS_ERRORS):
            self._stasis_kept(run, error)
        if run.pattern == "consent_gate":
            self._gate_failed(run, error)
        if run.pattern == "hardware":
            self._hardware_failed(run, error)
        elif run.pattern == "delegate" and error.startswith("RuntimeError: delegated job "):
            self._delegate_failed(run, error)
        elif run.pattern == "service_call" and error.startswith("RuntimeError: service attempt "):
            self._service_failed(run, error)
        elif run.pattern == "service_call" and "validation error" in error \
                and not error.startswith(LOST_STASIS_ERRORS):
            # Its content has no bound a client could miss: a record the hop builds itself
            # (the attempt and its owner) that fails validation names no owner's end (an
            # owner's station-attempt bound moved past the first hop's 0, M9).
            self.checker.fail("wait_result_is_owner", f"service_call Run {run.id} failed "
                              f"validating a record of its own hop: {error[:160]!r}",
                              run=str(run.id))

    def _stasis_kept(self, run: Run, error: str) -> None:
        """stasis_kept: a lost or invalid checkpoint is excused only by a misfiled write
        of this Run's checkpoint (traced by the faulty storage layer)."""
        marker = str(run.id)
        if not any(MISFILED in line and marker in line
                   for line in self.checker.world.trace.lines):
            self.checker.fail("stasis_kept", f"{run.pattern} Run {run.id} failed as "
                              f"{error[:160]!r} though no write misfiled its checkpoint",
                              run=str(run.id))

    def _gate_done(self, run: Run) -> None:
        content = run.intent.content
        rounds, approvals = content.get("rounds", 1), content.get("approvals", 1)
        consents = self._consents_of(run)
        statuses = [c.status.value for c in consents]
        if approvals != 1:
            expected: dict[str, Any] = {"bottleneck": SEVERAL_APPROVALS}
            asked = 0
        elif rounds > MAX_CONSENT_ROUNDS:
            expected, asked = {"bottleneck": CHAIN_LIMIT}, MAX_CONSENT_ROUNDS
        else:
            expected, asked = {"verdicts": statuses}, rounds
        undecided = [c.id for c in consents if not c.status.decided]
        if run.result != expected or len(consents) != asked or undecided:
            self.checker.fail("gate_outcome", f"consent_gate Run {run.id} ({content}) is DONE "
                              f"with {run.result} after consents {statuses}; expected "
                              f"{expected} after {asked} decided consents", run=str(run.id))
        elif "verdicts" in expected:
            self._gate_effects(run, statuses)

    def _gate_failed(self, run: Run, error: str) -> None:
        """gate_outcome: content within the Pattern's declared bounds is a valid gate, so
        its Run never fails validating that content (a bound moved, M9)."""
        content = run.intent.content
        # Only content that names nothing but the bounded fields is judged: GateState
        # forbids unknown fields (a client's key-reuse variant adds one), and refusing
        # those is right.
        inside = set(content) <= set(GATE_BOUNDS) and all(
            isinstance(content.get(k, lo), int) and lo <= content.get(k, lo) <= hi
            for k, (lo, hi) in GATE_BOUNDS.items())
        if inside and "validation error" in error and not error.startswith(LOST_STASIS_ERRORS):
            self.checker.fail("gate_outcome", f"consent_gate Run {run.id} ({content}) failed "
                              f"validating content within the gate's bounds: {error[:160]!r}",
                              run=str(run.id))

    def _gate_effects(self, run: Run, statuses: list[str]) -> None:
        """gate_effects_follow_verdicts: round n (1-based) applies `approved-n` only when its
        verdict is APPROVED; the sink's applied calls are the effects that happened."""
        prefix = f"{run.id}:"
        applied = sorted(c.identity[len(prefix):] for c in self.checker.world.effects.calls
                         if c.applied and c.identity.startswith(prefix))
        wanted = sorted(f"approved-{n}" for n, status in enumerate(statuses, 1)
                        if status == ConsentStatus.APPROVED.value)
        if applied != wanted:
            self.checker.fail("gate_effects_follow_verdicts", f"consent_gate Run {run.id} is "
                              f"DONE with verdicts {statuses} but applied {applied}; expected "
                              f"{wanted}", run=str(run.id))

    def _hardware_done(self, run: Run) -> None:
        needs = list(run.intent.content.get("needs", ["gpu"]))
        overrun = budget_overrun(needs)
        expected = {"used": needs, "calls": len(needs)}
        if overrun is not None or run.result != expected:
            self.checker.fail("hardware_outcome", f"hardware Run {run.id} (needs {needs}) is "
                              f"DONE with {run.result}; expected "
                              f"{overrun or expected}", run=str(run.id))

    def _hardware_failed(self, run: Run, error: str) -> None:
        needs = list(run.intent.content.get("needs", ["gpu"]))
        if error.startswith(IMPOSSIBLE_HARDWARE_ERRORS):
            self.checker.fail("hardware_outcome", f"hardware Run {run.id} failed as "
                              f"{error[:160]!r}", run=str(run.id))
        if error.startswith("hardware budget exhausted"):
            overrun = budget_overrun(needs)
            if error != overrun:
                self.checker.fail("hardware_outcome", f"hardware Run {run.id} (needs {needs}) "
                                  f"failed as {error!r}; the budget gives {overrun!r}",
                                  run=str(run.id))

    def _delegate_done(self, run: Run) -> None:
        result = run.result or {}
        job = self._agent_job(result.get("job"))
        if job is None or job.run_id != run.id or job.status is not AgentJobStatus.SUCCEEDED \
                or result.get("answer") != job.result:
            self.checker.fail("wait_result_is_owner", f"delegate Run {run.id} is DONE with "
                              f"{result} but its job is "
                              f"{None if job is None else (job.run_id, job.status.value)}",
                              run=str(run.id))

    def _delegate_failed(self, run: Run, error: str) -> None:
        owner, ended = _ended(error)  # "RuntimeError: delegated job <id> ended <STATUS>"
        job = self._agent_job(owner)
        if job is None or job.run_id != run.id or job.status.value != ended \
                or (job.status is AgentJobStatus.SUCCEEDED and job.result is not None):
            self.checker.fail("wait_result_is_owner", f"delegate Run {run.id} failed as "
                              f"{error[:120]!r} but that job is "
                              f"{None if job is None else (job.run_id, job.status.value)}",
                              run=str(run.id))

    def _service_done(self, run: Run) -> None:
        result = run.result or {}
        attempt = self._attempt(result.get("attempt"))
        if attempt is None or attempt.owner.run_id != run.id \
                or attempt.state is not ServiceState.SUCCEEDED \
                or result.get("answer") != attempt.result:
            self.checker.fail("wait_result_is_owner", f"service_call Run {run.id} is DONE with "
                              f"{result} but its attempt is "
                              f"{None if attempt is None else attempt.state.value}",
                              run=str(run.id))

    def _service_failed(self, run: Run, error: str) -> None:
        owner, ended = _ended(error)  # "RuntimeError: service attempt <id> ended <STATE>"
        attempt = self._attempt(owner)
        if attempt is None or attempt.owner.run_id != run.id \
                or attempt.state.value != ended or attempt.state is ServiceState.SUCCEEDED:
            self.checker.fail("wait_result_is_owner", f"service_call Run {run.id} failed as "
                              f"{error[:120]!r} but that attempt is "
                              f"{None if attempt is None else attempt.state.value}",
                              run=str(run.id))

    def _agent_job(self, raw: object) -> Any:
        try:
            return self.checker.world.ledger.agent_job_table.get(UUID(str(raw)))
        except ValueError:
            return None

    def _attempt(self, raw: object) -> Any:
        try:
            return self.checker.world.services.attempt_table.get(UUID(str(raw)))
        except ValueError:
            return None

    # -- at the approver ----------------------------------------------------------------

    def verdict_answered(self, before: Consent, parked: bool, approve: bool, principal: str,
                         outcome: str, since: int) -> None:
        """verdict_honoured, as a verdict returns; `before` is the consent as the approver
        read it, `parked` whether its Run waited on it then, `since` the trace length at
        the call's start."""
        self.checker._guarded(
            lambda: self._verdict(before, parked, approve, principal, outcome, since))

    def _verdict(self, before: Consent, parked: bool, approve: bool, principal: str,
                 outcome: str, since: int) -> None:
        world = self.checker.world
        now = world.ledger.consent_table.get(before.id)
        wanted = ConsentStatus.APPROVED if approve else ConsentStatus.DENIED
        if principal != before.owner:
            if outcome == "decided":
                self.checker.fail("verdict_honoured", f"consent {before.id} of {before.owner!r} "
                                  f"accepted a verdict of {principal!r}", consent=str(before.id))
            return
        if outcome == "decided":
            if before.status.decided and before.status is not wanted:
                self.checker.fail("verdict_honoured", f"consent {before.id}, decided "
                                  f"{before.status.value}, accepted the contradicting verdict "
                                  f"{wanted.value}: the first verdict must stand",
                                  consent=str(before.id))
            if now is None or now.status is not wanted or now.decided_by != principal:
                self.checker.fail("verdict_honoured", f"the owner's verdict {wanted.value} on "
                                  f"consent {before.id} answered decided but the consent is "
                                  f"{None if now is None else now.status.value}",
                                  consent=str(before.id))
            run = world.ledger.run_table.get(before.run_id)
            if parked and run is not None and run.status is RunStatus.AWAITING_CONSENT \
                    and run.consent_id == before.id and not _faulted(world.trace.lines[since:]):
                self.checker.fail("verdict_honoured", f"the owner's verdict on consent "
                                  f"{before.id} answered decided while Run {run.id} still "
                                  "waits on it, no fault during the call", run=str(run.id))
        elif outcome in ("ConsentRefused", "NotFound") and (
                outcome == "NotFound" or now is None
                or (now.status is not ConsentStatus.CANCELLED and now.status is wanted)):
            self.checker.fail("verdict_honoured", f"the owner's verdict {wanted.value} on "
                              f"consent {before.id} was refused as {outcome} while the "
                              f"consent is {None if now is None else now.status.value}",
                              consent=str(before.id))

    def final(self) -> None:
        for consent in sorted(self.checker.world.ledger.consent_table.values(),
                              key=lambda c: (c.created_at, c.id)):
            if consent.status.decided and consent.decided_by != consent.owner:
                self.checker.fail("verdict_honoured", f"consent {consent.id} of "
                                  f"{consent.owner!r} was decided by {consent.decided_by!r}",
                                  consent=str(consent.id))
        self._errands_bounded()

    def _errands_bounded(self) -> None:
        """errands_bounded: an `errands` Run asked for N rounds owns at most N agent jobs
        and N service attempts (runtime/patterns/waits.py; one of each per round), however
        it ended: a Run that loops past its rounds keeps spawning children."""
        world = self.checker.world
        jobs: dict[UUID, int] = {}
        for job in world.ledger.agent_job_table.values():
            jobs[job.run_id] = jobs.get(job.run_id, 0) + 1
        attempts: dict[UUID, int] = {}
        for attempt in world.services.attempt_table.values():
            if (owner := attempt.owner.run_id) is not None:
                attempts[owner] = attempts.get(owner, 0) + 1
        for run in sorted(world.ledger.run_table.values(), key=lambda r: (r.created_at, r.id)):
            if run.pattern != "errands":
                continue
            rounds = run.intent.content.get("rounds", ERRANDS_DEFAULT_ROUNDS)
            owned = (jobs.get(run.id, 0), attempts.get(run.id, 0))
            if max(owned) > rounds:
                self.checker.fail("errands_bounded", f"errands Run {run.id} asked for {rounds} "
                                  f"rounds but owns {owned[0]} agent jobs and {owned[1]} "
                                  "service attempts", run=str(run.id))
            answers = (run.result or {}).get("answers", [])
            if run.status is RunStatus.DONE and (owned != (rounds, rounds)
                                                 or len(answers) != 2 * rounds):
                self.checker.fail("errands_complete", f"errands Run {run.id} "
                                  f"({run.intent.content}) is DONE after {rounds} rounds "
                                  f"with {len(answers)} answers, owning {owned[0]} agent "
                                  f"jobs and {owned[1]} service attempts", run=str(run.id))


def _ended(error: str) -> tuple[str | None, str | None]:
    """The owner id and final state named by a wait's failure, "<Error>: <noun> <noun>
    <id> ended <STATE>" (the form runtime/stasis writes); (None, None) otherwise."""
    words = error.split()
    return (words[3], words[5]) if len(words) > 5 else (None, None)
