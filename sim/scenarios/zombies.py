"""Scenarios of paused hops and of boots that outlive their presumed death.

- `paused`: every pattern while hops pause at the moments operators and relays
  race with (after the dequeue, after the claim, after an effect, between a
  stasis checkpoint and its park) and a cancel, a consent verdict, a replay of
  the admission or a relay pass fires right there before the hop goes on;
- `zombies`: every pattern on a Vessel whose boots hold leases; some boots
  freeze at a fault point for longer than the lease (presumed dead, a successor
  starts beside them) and then resume, their stale hops trying to claim,
  settle, checkpoint, park and write Steps after the successor fenced them, and
  a resumed zombie may be killed later (FaultKind.ZOMBIE_KILL), leaving what it
  began since to the successor's relays;
- `two_vessels`: two Vessels serve one database at once under crashes and
  outages; some boots freeze, some lose the database alone until their lease
  runs out. A live peer's work is never fenced; a lapsed one's is recovered.
"""

from __future__ import annotations

import anyio

from runtime.recovery.boot_lease import BOOT_LEASE_S
from sim.faults.options import FaultOptions
from sim.scenarios import Scenario, register
from sim.scenarios.people import Approver, Operator
from sim.scenarios.restarts import ALL_PATTERNS
from sim.scenarios.waits import content, heal
from sim.scenarios.workload import submit_stream
from sim.world import World


def _paused(options: FaultOptions) -> FaultOptions:
    return options.model_copy(update={
        "pause_per_point_hit": max(options.pause_per_point_hit, 0.15),
        "max_pause_s": 5.0,
    })


def _zombie(options: FaultOptions) -> FaultOptions:
    return options.model_copy(update={
        "stall_per_point_hit": max(options.stall_per_point_hit, 0.03),
        "max_stalls": max(options.max_stalls, 2),
        "stall_s": (2 * BOOT_LEASE_S + 5.0, 8 * BOOT_LEASE_S),
        "crash_per_boot": min(options.crash_per_boot, 0.2),
    })


def _killed_zombie(options: FaultOptions) -> FaultOptions:
    """Zombies that are killed some points after they resume (one point in twenty: a
    zombie killed at its first point after resuming leaves nothing behind), and Step
    appends that fail now and then in every seed: what a resumed zombie settled alone
    (its Step writer failed) and had not yet evidenced is left to the successor's
    relay, since no startup follows the kill (rule relays.recorded_evidence_debts).
    Not in two_vessels: there it moved the rare seeds that catch orphans_of_any_boot
    out of 1-60."""
    return _zombie(options).model_copy(update={
        "zombie_kill_per_point_hit": max(options.zombie_kill_per_point_hit, 0.05),
        "step_fail_per_append": max(options.step_fail_per_append, 0.05),
    })


def _overlapping(options: FaultOptions) -> FaultOptions:
    return _zombie(options).model_copy(update={
        "partition_per_point_hit": max(options.partition_per_point_hit, 0.02),
        "max_stalls": max(options.max_stalls, 3),
    })


def _leased(world: World) -> None:
    world.boot_lease_s = BOOT_LEASE_S


def _two_vessels(world: World) -> None:
    _leased(world)
    world.vessels = 2


async def _workload(world: World) -> None:
    approver = Approver(world)
    world.actors["approver"] = approver
    async with anyio.create_task_group() as tg:
        tg.start_soon(approver.run)
        tg.start_soon(Operator(world, share=0.1).run, anyio.current_time() + 300.0)
        await submit_stream(world, ALL_PATTERNS, content, count=(15, 30))
        tg.cancel_scope.cancel()


def _describe(name: str) -> str:
    for part in (__doc__ or "").split("- `")[1:]:
        if part.startswith(name + "`"):
            return " ".join(part.split(":", 1)[1].split()).rstrip(";.")
    return name


PAUSED = register(Scenario("paused", _describe("paused"), _workload, heal, _paused))
ZOMBIES = register(Scenario("zombies", _describe("zombies"), _workload, heal, _killed_zombie,
                            setup=_leased))
TWO_VESSELS = register(Scenario("two_vessels", _describe("two_vessels"), _workload, heal,
                                _overlapping, setup=_two_vessels))
