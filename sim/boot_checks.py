"""Invariants of overlapping boots: zombies, partitions, several Vessels (issues 15, 18).

Seed 000_81a5c720b14d934a.txt ("Cancellation, mutation, and recovery") lets
startup fence and fail as lost only the work of an earlier boot; issue 15
(M11) widens the topology to several Vessels on one database, each holding a
lease in the boot registry (runtime.recovery.boot_lease). In the simulator a
boot may stall (a zombie: presumed dead, then it resumes) or lose the database
alone (a partition), so its lease lapses while the process lives on. Two rules:

- `orphans_of_earlier_boots`: a hop is failed as lost (the orphan path) only by
  another boot, and only when its holder is dead (crashed, stopped) or its lease
  ran out while the holder itself was unreachable (stalled or partitioned). A
  live peer that merely shared a database outage with everyone is never fenced,
  neither its claimed hops nor a job it dequeued and has not claimed yet;
- `fenced_holder_inert`: once its hop was failed as lost, the fenced-out holder
  changes nothing more of that hop: no settlement, checkpoint, consent, agent
  job or park of that Run and sequence lands from it;
- `claims_on_a_renewed_lease`: a boot's worker claims a hop only on a lease its
  peers see live, or once the boot renewed its lease (or tried to) after its
  startup reconciliation: a reconciliation longer than the lease never leaves
  it serving on the lease it registered before reconciling.

These read durable records (ledger rows, the boot registry) and what the fault
proxies did to each boot (`Boot.unreachable`); violations go through
`Checker.fail`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from uuid import UUID

from runtime.keys import parse_hop_key
from runtime.models import DeliveryState, RunDelivery, RunStatus
from runtime.recovery.orphans import LOST
from runtime.retry import RETRY_BUDGET_S
from runtime.seams import JobStatus
from sim.clock import EPOCH

if TYPE_CHECKING:
    from sim.checker import Checker
    from sim.world import Boot

INVARIANTS = (
    ("orphans_of_earlier_boots", "a hop is failed as lost only by another boot and only when "
     "its holder is dead, or its lease ran out while the holder was itself stalled or cut "
     "off from the database: never a live boot's own hop, never a live peer's",
     "seed 000 'Cancellation, mutation, and recovery' (orphans of an earlier boot); issue 15 "
     "item 1 (fence only dead boots' work)"),
    ("fenced_holder_inert", "once a hop was failed as lost, the fenced-out holder changes "
     "nothing more of that Run and sequence: no settlement, checkpoint, consent, agent job "
     "or park", "seed 000 'Admission and exact claim' (sequence-fenced settlement); "
     "issue 18 item 2 (zombie incarnations)"),
    ("lease_lapse_reported", "a boot counts (and logs) a lapse of its own lease for every "
     "renewal the registry answered expired and every renewal that returned a whole lease "
     "or more after the previous registration or renewal began, whatever the registry said "
     "(it may have committed after the lease ran out, while peers could judge it dead)",
     "issue 15 item 1 (boot leases: a lapsed lease is reported, since other boots may have "
     "recovered its work); runtime.recovery.boot_lease"),
    ("claims_on_a_renewed_lease", "a boot claims a hop only while its lease is live or "
     "after it renewed that lease (or tried to) once its startup reconciliation was done: "
     "never on the expired lease it registered before reconciling",
     "seed 000 'Cancellation, mutation, and recovery' (startup reconciliation before "
     "serving); issue 15 item 1 (boot leases); issue 18 item 5"),
)

HOP_WRITES = frozenset({
    "settle_run", "save_checkpoint", "create_consent", "park_consent", "create_agent_job",
    "park_delegate", "park_service", "await_hardware", "resume_hardware",
})
"""Ledger writes a hop makes for its own Run and sequence. Its Steps are held to
`terminal_step_is_last` instead (sim.checker): the ledger refuses every Step after
a Run's terminal one, and a fenced hop may still write Steps in the moment between
its Run's failure and that terminal Step."""

def hop_of(name: str, args: tuple[Any, ...]) -> tuple[UUID, int] | None:
    """The (Run, sequence) a hop write concerns: leading arguments or a record's fields."""
    if name not in HOP_WRITES or not args:
        return None
    first = args[0]
    if isinstance(first, UUID) and len(args) > 1 and isinstance(args[1], int):
        return first, args[1]
    run_id, seq = getattr(first, "run_id", None), getattr(first, "seq", None)
    if isinstance(run_id, UUID) and isinstance(seq, int):
        return run_id, seq
    return None


FENCEABLE = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.AWAITING_HARDWARE)
"""A Run in these waits on its hop job: aborting it is a fence, not a containment."""


@dataclass
class BootChecks:
    checker: Checker
    fenced: dict[tuple[UUID, int], int] = field(default_factory=dict)
    """(Run, sequence) failed as lost -> the boot number that held its claim."""
    lease_seen: dict[str, float] = field(default_factory=dict)
    """Boot id -> the lease end its latest renewal wrote."""
    renewed_after_startup: set[str] = field(default_factory=set)
    """Boot ids that asked to renew their lease once their reconciliation was done."""
    leases_written: dict[str, list[tuple[datetime, datetime, bool | None]]] = field(
        default_factory=dict)
    """Boot id -> (the `now` its keeper passed, when the call returned, the registry's
    answer; None for the registration) of each registration or renewal that returned."""
    lapses: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    """Boot id -> (lease end, renewal that followed it) for each lease that ran out while
    the boot was unreachable: its peers could rightly judge it dead in between."""

    def _boot(self, boot_id: str | None) -> Boot | None:
        return next((b for b in self.checker.world.boots if b.id == boot_id), None)

    def delivery_changed(self, prev: RunDelivery | None, d: RunDelivery) -> None:
        if prev is None or prev.state is not DeliveryState.CLAIMED \
                or d.state is not DeliveryState.FAILED:
            return
        world = self.checker.world
        run = world.ledger.run_table.get(d.run_id)
        if run is None or run.error != LOST:
            return  # a same-boot abandoned hop (fail_abandoned) is fenced by its own token
        holder, writer = self._boot(prev.claimed_boot), world.writer
        if holder is None:
            return
        self.fenced[(d.run_id, d.seq)] = holder.number
        if writer is holder:
            self.checker.fail("orphans_of_earlier_boots", f"boot {holder.number} failed its "
                              f"own live hop {d.key} as lost", key=d.key)
        if holder.alive and not self._lapsed_while_unreachable(holder):
            who = writer.number if writer is not None else None
            self.checker.fail("orphans_of_earlier_boots", f"boot {who} failed hop {d.key} of "
                              f"live boot {holder.number} as lost", key=d.key,
                              holder=holder.number, lease=self._lease_end(holder))

    def _lease_end(self, boot: Boot) -> float | None:
        lease = self.checker.world.ledger.boot_table.get(boot.id)
        if lease is None:
            return None
        return (lease.lease_expires_at - EPOCH).total_seconds()

    def _lapsed_while_unreachable(self, boot: Boot) -> bool:
        """The boot's lease ran out, and it was stalled or partitioned when it did (or
        since before), or is so now: the lapse is the holder's own, not only a shared
        outage's that a live holder would renew right after."""
        end = self._lease_end(boot)
        now = self.checker.world.clock.monotonic()
        # A peer that read the lapse before the zombie renewed may commit its judgment
        # just after, within its ledger retry budget: judged dead when it was.
        if any(renewed <= now <= renewed + RETRY_BUDGET_S
               for _, renewed in self.lapses.get(boot.id, ())):
            return True
        if end is None or end > now:
            return False
        # Lapsed while unreachable, or lapsed (an outage) and unreachable since: to its
        # peers it is a zombie either way.
        return any(start <= end or start <= now <= until for start, until in boot.unreachable)

    def _renewed(self, boot: Boot) -> None:
        """Remember a lease that lapsed while `boot` was unreachable, once it renews."""
        now = self.checker.world.clock.monotonic()
        prev = self.lease_seen.get(boot.id)
        if prev is not None and prev < now and any(
                start <= prev <= until for start, until in boot.unreachable):
            self.lapses.setdefault(boot.id, []).append((prev, now))
        end = self._lease_end(boot)
        if end is not None:
            self.lease_seen[boot.id] = end

    def lease_written(self, boot: Boot, now: datetime, renewed: bool | None) -> None:
        """`boot`'s register_boot (renewed None) or renew_boot call returned `renewed`."""
        returned = self.checker.world.clock.now()
        self.leases_written.setdefault(boot.id, []).append((now, returned, renewed))

    def final(self) -> None:
        """lease_lapse_reported: each serving boot's keeper counted the lapses its own
        registrations and renewals show (read once the simulation ended)."""
        for boot in self.checker.world.boots:
            relays = boot.lifespan.relays
            keeper = relays.lease if relays is not None else None
            if keeper is None:
                continue  # it never served: its keeper is out of reach
            lease = timedelta(seconds=keeper.lease_s)
            expected, previous = 0, None
            for now, returned, renewed in self.leases_written.get(boot.id, ()):
                if renewed is not None and (not renewed or (
                        previous is not None and returned - previous >= lease)):
                    expected += 1
                previous = now
            if keeper.lapses != expected:
                self.checker.fail("lease_lapse_reported", f"boot {boot.number} counted "
                                  f"{keeper.lapses} lapses of its lease, its renewals show "
                                  f"{expected}", holder=boot.number)

    def renewal_asked(self, boot: Boot) -> None:
        """`boot` calls renew_boot (whatever comes of it); counted once it reconciled."""
        if boot.lifespan.status.report is not None:
            self.renewed_after_startup.add(boot.id)

    def on_claim(self, boot_id: str) -> None:
        """A claim of `boot_id` committed: not on the expired lease it registered before
        its reconciliation (the claim outlived no renewal: peers judge it dead)."""
        boot = self._boot(boot_id)
        if boot is None or boot.id in self.renewed_after_startup:
            return
        end = self._lease_end(boot)
        now = self.checker.world.clock.monotonic()
        if end is None or end > now:
            return
        self.checker.fail("claims_on_a_renewed_lease", f"boot {boot.number} claimed a hop at "
                          f"t={now:g} on the lease it registered before reconciling, expired "
                          f"at t={end:g}, without renewing it first", holder=boot.number,
                          lease=end)

    def on_abort(self, boot: int, key: str) -> None:
        """As boot `boot` sends an abort for hop job `key`: a fence of another boot's
        job while that Run still waits on it (QUEUED, RUNNING, AWAITING_HARDWARE at that
        sequence; a cancellation's containment is not a fence) needs its taker dead."""
        world = self.checker.world
        taker = world.taken_by.get(key)
        if taker is None or taker == boot:
            return
        run_id, seq = parse_hop_key(key)
        run = world.ledger.run_table.get(run_id)
        job = world.broker.jobs.get(key)
        if run is None or run.seq != seq or run.status not in FENCEABLE or job is None \
                or job.info.status is not JobStatus.ACTIVE:
            return
        holder = world.boots[taker - 1]
        if holder.alive and not self._lapsed_while_unreachable(holder):
            self.checker.fail("orphans_of_earlier_boots", f"boot {boot} fenced hop job {key} "
                              f"that live boot {taker} holds ({run.status.value})", key=key,
                              holder=taker, lease=self._lease_end(holder))

    def on_write(self, boot: Boot, name: str, args: tuple[Any, ...]) -> None:
        """A write of `boot` changed the ledger: not for a hop fenced out of it."""
        if name == "renew_boot":
            self._renewed(boot)
            return
        hop = hop_of(name, args)
        if hop is None or self.fenced.get(hop) != boot.number:
            return
        self.checker.fail("fenced_holder_inert", f"boot {boot.number} wrote {name} for hop "
                          f"{hop[0]}:{hop[1]} after it was failed as lost", run=str(hop[0]),
                          seq=hop[1])
