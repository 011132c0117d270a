"""Invariants of the admission edge (runtime.engine, runtime.sessions), read at the client.

Seed 000_81a5c720b14d934a.txt, "Admission and exact claim", as the simulated
client sees it across the process boundary:

- `admission_publishes`: a submit that hands back a QUEUED Run whose delivery
  is still PENDING, with no broker job for its hop key, has skipped the
  publish it owes; only a fault during the call (a failed publish, a lost
  acknowledgement, a crash) excuses that, and then the delivery relay
  publishes it later. A submit never hands back a HELD delivery: its hook
  ran, so the generation was released or failed.
- `invalid_intent_refused`: an Intent that fails validation is refused as
  InvalidIntent naming the failing field, and nothing is written. The client
  probes the live boot's engine after each of its submissions with one
  malformed copy of what it sent (built with `model_copy`, which skips
  pydantic validation, as a careless surface would). The refusal happens
  before submit's first await, so a probe changes no trace.
- `admission_single_flight`: a process runs one retention hook of a Run at a
  time. Same-key admissions in one process are serialised (runtime.sessions),
  so a second call of the key waits for the first's hook and then finds the
  generation released; only another Vessel may run a hook of the same Run
  meanwhile. The client wraps each hook it hands a boot and counts the hooks
  running per (boot, Run).
- `admission_locks_released`: once the world is quiescent no live boot holds
  or keeps a per-key admission lock (idempotency key, Bridge session) or a
  per-Run evidence-repair lock: each is dropped when nobody holds or waits
  on it, so a long-lived Vessel's lock tables do not grow with every key.
- `held_names_owner` (after every committed write): a HELD delivery names the
  caller whose hook must release it; an open delivery past HELD names none.
- `session_busy_is_true`: SessionBusy goes only to an Intent with a session,
  naming a Run of that session (a sessionless Intent is never fenced).
- `replay_before_fence`: a keyed call whose Run was admitted before it began is
  answered as a replay (the Run, a conflict, a held refusal), never SessionBusy:
  the key is decided before the session fence.
- `retention_failure_settled`: a call whose own retention hook completed is
  told RetentionFailed only if its held generation is FAILED (another owner
  failed it first) or a fault struck its release; never while the admission
  it released goes on to run.
- `admission_pins_latest`: an Intent of a Pattern the admitting registry holds
  is never refused as unknown, and its new Run is pinned to that registry's
  highest version of that same Pattern (a rolling upgrade's newer registry
  pins the newer version; a name test read as an order pinned another
  Pattern's, M9).

Nothing here draws a random number or awaits a clock, so watching changes no
trace of an unbroken runtime.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any, ClassVar
from uuid import UUID

import anyio

from runtime.engine import RetentionHook, Submission
from runtime.errors import IdempotencyConflict, InvalidIntent, SessionBusy, UnknownPattern
from runtime.events import repair
from runtime.models import DeliveryState, Intent, Run, RunDelivery, RunStatus
from runtime.registry import WorkflowRegistry
from runtime.sessions import KeyedLocks

if TYPE_CHECKING:
    from sim.checker import Checker
    from sim.world import Boot

INVARIANTS = (
    ("admission_publishes", "a submit (or replay) that returns a QUEUED Run with a PENDING "
     "delivery has published that hop to the broker before returning, unless a fault struck "
     "the call", "seed 000 'Admission and exact claim' (publish after commit)"),
    ("invalid_intent_refused", "an Intent failing validation (blank pattern or key, priority "
     "outside 0-100) is refused as InvalidIntent naming that field, before anything is "
     "written", "seed 000 'Admission and exact claim'; runtime/engine.py validated_intent"),
    ("held_names_owner", "a HELD delivery names its retention owner (the admitting caller's "
     "sigil); a PENDING, PUBLISHED or CLAIMED one names none", "seed 000 'Admission and exact "
     "claim' (HELD while a caller-retention hook must still run)"),
    ("session_busy_is_true", "SessionBusy is answered only to an Intent that names a Bridge "
     "session, and names a Run of that very session", "seed 000 'Admission and exact claim' "
     "(one nonterminal Run per Bridge session)"),
    ("replay_before_fence", "a keyed submit whose Run was admitted before the call began is "
     "answered as a replay of it (the Run, a conflict or a held refusal), never SessionBusy: "
     "idempotency is decided before the session fence",
     "seed 000 'Admission and exact claim' (a replay returns the same Run; one nonterminal "
     "Run per Bridge session applies to new admissions)"),
    ("retention_failure_settled", "a submit whose retention hook completed answers "
     "RetentionFailed only when its held generation is FAILED (another owner failed it) or a "
     "fault struck the release: never for an admission that was released and goes on",
     "seed 000 'Admission and exact claim' (HELD until the caller-retention hook ran)"),
    ("replay_not_created", "a submit answers created=True only when this call admitted the "
     "Run: a keyed Run committed before the call began is a replay (created=False)",
     "seed 000 'Admission and exact claim' (a replay returns the existing Run)"),
    ("scope_names_caller", "a keyed Run is admitted under its caller's idempotency scope "
     "(source:sigil, stored with the Run beside its key); a keyless Run has "
     "none", "seed 000 'Admission and exact claim' (a scoped idempotency key)"),
    ("admission_single_flight", "one process never runs two retention hooks of one Run at "
     "once: its same-key admissions are serialised, so retention happens once at a time per "
     "process", "seed 000 'Admission and exact claim' (one-process single flight per key); "
     "runtime/sessions.py"),
    ("admission_pins_latest", "an Intent naming a Pattern the admitting engine's registry "
     "holds is never refused as UnknownPattern, and the Run it admits is pinned to that "
     "registry's highest version of that very Pattern (not another Pattern's)",
     "seed 000 'Admission and exact claim' (admission pins the Pattern version)"),
    ("admission_locks_released", "after heal no live boot holds or keeps a per-key admission "
     "or evidence-repair lock: a key's lock is dropped once nobody holds or waits on it",
     "runtime/sessions.py KeyedLocks; seed 000 'Admission and exact claim'"),
)

MAX_PATTERN_VERSION = 20
"""The highest Pattern version the checker looks up (every registry holds 1 or 2)."""

MALFORMED: tuple[tuple[str, Any], ...] = (
    ("pattern", ""),
    ("priority", 101),
    ("idempotency_key", "  "),
    ("priority", -1),
)
"""The malformed copies the probe cycles through: (field, invalid value)."""


def _faulted(lines: list[str]) -> bool:
    return any('"fault.fired"' in line or '"boot.crash"' in line for line in lines)


class AdmissionChecks:
    one_coordinator_per_vessel: ClassVar[bool] = True
    """Each boot's engine is one Vessel process, whose coordinator single-flights its
    keys (admission_single_flight). sim.breaks turns this off with the breaks that let
    one process stand in for two Vessels racing a key (TWO_VESSEL_ADMISSIONS)."""

    def __init__(self, checker: Checker) -> None:
        self.checker = checker
        self.probes = 0
        self.retaining: Counter[tuple[str, UUID]] = Counter()
        """Retention hooks running now, per (boot id, Run id)."""

    # -- after every committed write ------------------------------------------------

    def held_names_owner(self, d: RunDelivery) -> None:
        """held_names_owner: HELD exactly names the caller who must release it."""
        open_states = (DeliveryState.PENDING, DeliveryState.PUBLISHED, DeliveryState.CLAIMED)
        run = self.checker.world.ledger.run_table.get(d.run_id)
        if d.state is DeliveryState.HELD and run is not None \
                and d.held_by != run.intent.sigil:
            self.checker.fail("held_names_owner", f"delivery {d.key} is HELD by "
                              f"{d.held_by!r}, not its caller {run.intent.sigil!r}", key=d.key)
        if d.state in open_states and d.held_by is not None:
            self.checker.fail("held_names_owner", f"delivery {d.key} is {d.state.value} yet "
                              f"names a retention owner {d.held_by!r}", key=d.key)

    def scope_names_caller(self, run: Run) -> None:
        """scope_names_caller, as a Run is first written."""
        intent = run.intent
        expected = f"{intent.source}:{intent.sigil}" if run.idempotency_key else None
        if run.idempotency_scope != expected:
            self.checker.fail("scope_names_caller", f"Run {run.id} admitted with idempotency "
                              f"scope {run.idempotency_scope!r}, not {expected!r}",
                              run=str(run.id))

    # -- at the client --------------------------------------------------------------

    def submit_returned(self, submission: Submission, since: int) -> None:
        """admission_publishes, as a submit returns; `since` is the trace length at its start."""
        self.checker._guarded(lambda: self._publishes(submission, since))
        self.checker._guarded(lambda: self._replay_not_created(submission, since))

    def pins_latest(self, registry: WorkflowRegistry, intent: Intent,
                    submission: Submission | None, refused: BaseException | None) -> None:
        """admission_pins_latest, as a submit through an engine over `registry` returns
        `submission` or is refused with `refused`. The checker's own reading of the
        registry: every version it pins of that name, by exact lookup."""
        versions = [v for v in range(1, MAX_PATTERN_VERSION + 1)
                    if registry.pinned(intent.pattern, v) is not None]
        if not versions:
            return
        if isinstance(refused, UnknownPattern):
            self.checker.fail("admission_pins_latest", f"an Intent of {intent.pattern} was "
                              f"refused as unknown though its registry holds versions "
                              f"{versions}", pattern=intent.pattern)
        if submission is None or not submission.created:
            return
        run = submission.run
        if (run.pattern, run.pattern_version) != (intent.pattern, max(versions)):
            self.checker.fail("admission_pins_latest", f"an Intent of {intent.pattern} "
                              f"admitted Run {run.id} pinned to {run.pattern}@"
                              f"{run.pattern_version}; the registry's latest is "
                              f"{intent.pattern}@{max(versions)}", run=str(run.id))

    def _replay_not_created(self, submission: Submission, since: int) -> None:
        if not submission.created:
            return
        run_id = str(submission.run.id)
        before = self.checker.world.trace.event_lines("tx.admit_run", since)
        if any(run_id in line and '"changed":true' in line for line in before):
            self.checker.fail("replay_not_created", f"submit answered created=True for Run "
                              f"{run_id}, admitted before the call began", run=run_id)

    def _publishes(self, submission: Submission, since: int) -> None:
        world = self.checker.world
        d = submission.delivery
        if d.state is DeliveryState.HELD:
            self.checker.fail("admission_publishes", f"submit returned Run {d.run_id} with its "
                              f"delivery {d.seq} still HELD: neither released nor failed",
                              key=d.key)
        if d.state is not DeliveryState.PENDING:
            return
        run = world.ledger.run_table.get(d.run_id)
        row = world.ledger.delivery_table.get((d.run_id, d.seq))
        if run is None or run.status is not RunStatus.QUEUED or run.seq != d.seq:
            return  # cancelled or moved on meanwhile: the acknowledgement lost honestly
        if row is None or row.state is not DeliveryState.PENDING or d.key in world.broker.jobs:
            return
        if _faulted(world.trace.lines[since:]):
            return  # a fault struck this very call: the relay publishes it
        self.checker.fail("admission_publishes", f"submit returned Run {run.id} QUEUED with "
                          f"delivery {d.seq} {d.state.value} and no job {d.key}, no fault "
                          "during the call", key=d.key)

    def watched(self, boot: Boot, retain: RetentionHook | None) -> RetentionHook | None:
        """admission_single_flight: `retain` as `boot` runs it, counted while it runs.
        No await of its own and no random draw: watching changes no trace."""
        if retain is None:
            return None

        async def hook(run: Run) -> None:
            held = (boot.id, run.id)
            if self.retaining[held] and self.one_coordinator_per_vessel:
                self.checker.report("admission_single_flight", f"{boot.id} runs a second "
                                    f"retention hook of Run {run.id} while one is running: "
                                    "its same-key admissions are not single-flighted",
                                    run=str(run.id))
            self.retaining[held] += 1
            try:
                await retain(run)
            finally:
                self.retaining[held] -= 1
                if not self.retaining[held]:
                    del self.retaining[held]

        return hook

    def conflict_names_key(self, exc: IdempotencyConflict, intent: Intent) -> None:
        """idempotent_admission: a conflict names the very key the caller reused."""
        if exc.key != intent.idempotency_key:
            self.checker.report("idempotent_admission", f"a conflict on key "
                                f"{intent.idempotency_key!r} named key {exc.key!r}")

    def admitted_before(self, intent: Intent) -> UUID | None:
        """The Run the Intent's scoped key already admitted, read from the ledger's
        rows (not from the engine's id derivation), or None."""
        if intent.idempotency_key is None:
            return None
        scope = f"{intent.source}:{intent.sigil}"
        for run in self.checker.world.ledger.run_table.values():
            if run.idempotency_key == intent.idempotency_key and run.idempotency_scope == scope:
                return run.id
        return None

    def session_busy(self, exc: SessionBusy, intent: Intent, prior: UUID | None = None) -> None:
        """session_busy_is_true: SessionBusy names the caller's session and a Run in it;
        replay_before_fence: never to a keyed call whose Run (`prior`) existed already."""
        if prior is not None:
            self.checker.report("replay_before_fence", f"a replay of key "
                                f"{intent.idempotency_key!r} (Run {prior}, admitted before the "
                                f"call) was refused SessionBusy naming Run {exc.run_id}")
        other = self.checker.world.ledger.run_table.get(exc.run_id)
        if intent.session is None or exc.session != intent.session or other is None \
                or other.session != intent.session:
            self.checker.report("session_busy_is_true", f"an Intent of session "
                                f"{intent.session!r} was refused SessionBusy({exc.session!r}) "
                                f"naming Run {exc.run_id} of session "
                                f"{other.session if other else None!r}")

    def retention_failed(self, retained: list[UUID], since: int) -> None:
        """retention_failure_settled: the call's own hook completed (for the Runs in
        `retained`) and yet it answered RetentionFailed."""
        self.checker._guarded(lambda: self._retention_settled(retained, since))

    def _retention_settled(self, retained: list[UUID], since: int) -> None:
        world = self.checker.world
        for run_id in retained:
            run = world.ledger.run_table.get(run_id)
            d = world.ledger.delivery_table.get((run_id, run.seq)) if run is not None else None
            if d is None or d.state is DeliveryState.FAILED:
                continue  # another owner failed the generation first: the answer is true
            if _faulted(world.trace.lines[since:]):
                return  # a failed release: settled FAILED or resolved by the relay
            self.checker.fail("retention_failure_settled", f"RetentionFailed answered after "
                              f"the hook of Run {run_id} completed, with its delivery {d.seq} "
                              f"{d.state.value} and no fault during the call", key=d.key)

    async def probe_invalid(self, intent: Intent) -> None:
        """invalid_intent_refused: one malformed copy of `intent` sent to the live engine."""
        boot = self.checker.world.live_boot
        if boot is None or not boot.ready or self.checker.violations:
            return
        field, value = MALFORMED[self.probes % len(MALFORMED)]
        self.probes += 1
        bad = intent.model_copy(update={field: value})
        ledger = self.checker.world.ledger
        before = len(ledger.run_table), len(ledger.delivery_table)
        outcome: str
        try:
            await boot.engine.submit(bad)
            outcome = "admitted"
        except InvalidIntent as exc:
            outcome = "refused" if exc.field == field else f"InvalidIntent({exc.field!r})"
        except Exception as exc:  # the probe reports any other answer as the violation
            outcome = type(exc).__name__
        after = len(ledger.run_table), len(ledger.delivery_table)
        if outcome != "refused" or after != before:
            self.checker.report("invalid_intent_refused", f"an Intent with {field}={value!r} "
                                f"was answered {outcome}, writing {after[0] - before[0]} Runs")

    # -- once the world is quiescent ----------------------------------------------------

    def final(self) -> None:
        now = anyio.current_time()
        for boot in self.checker.world.alive_boots():
            if boot.frozen_until > now:
                continue  # a stalled zombie may be inside an admission still
            self._released(boot)

    def _released(self, boot: Boot) -> None:
        coordinator = boot.engine.coordinator
        tables: dict[str, KeyedLocks] = {"idempotency key": coordinator.keys,
                                         "session": coordinator.sessions}
        for what, locks in tables.items():
            kept = sorted(locks._locks)
            if kept:
                self.checker.fail("admission_locks_released", f"{boot.id} keeps {len(kept)} "
                                  f"{what} admission locks after heal: {kept[:3]}")
        mine = sorted(k for k in repair._REPAIRS._locks if k.startswith(f"{boot.id}:"))
        if mine:
            self.checker.fail("admission_locks_released", f"{boot.id} keeps {len(mine)} "
                              f"evidence-repair locks after heal: {mine[:3]}")
