"""Scenario `resubmit_race`: five service workers reconcile the same attempts against
a provider that replays by key and whose lookups lie for a while, while many submit and
lookup answers travel slowly (5-20 s late, inside the deadline). A worker that read an
attempt before its provider job was acknowledged can then act on an old "unknown"
answer after another worker recorded the job and a third found it gone (the lie): the
re-submit decision meets an INDETERMINATE attempt that already holds a provider job
identity, and a same-key replay proof for its current transmission (seed 000, "Service
job attempts": a missing job re-submits only on proof; same-key replay returns the
original job). Reached in about one seed of ten."""

from __future__ import annotations

import anyio

from sim.faults.options import FaultOptions
from sim.processes import supervise
from sim.scenarios import Scenario, register
from sim.scenarios.service import Registry, Requester, heal, serve
from sim.world import World

WORKERS = ("svc-a", "svc-b", "svc-c", "svc-d", "svc-e")
"""The requester reaches the first two (`service.live`); the others only reconcile."""
PROFILES = ("replay",)
"""A provider that replays by key and may lie in lookups (one that proves absence never
lies, so an old absence there is still true): acting on an old answer starts nothing."""
SLOW_REPLIES = 0.6
"""Share of submits and lookups whose answer arrives 5-20 s after the provider gave it."""


def _racy(options: FaultOptions) -> FaultOptions:
    """Lies, lost answers and timeouts often enough that an attempt is acknowledged and
    found gone again while an old answer travels."""
    return options.model_copy(update={
        "lookup_lies_per_lookup": max(options.lookup_lies_per_lookup, 0.4),
        "service_ack_lost_per_call": max(options.service_ack_lost_per_call, 0.3),
        "service_timeout_per_call": max(options.service_timeout_per_call, 0.15),
    })


async def drive(world: World) -> None:
    provider = world.provider
    provider.profile = world.streams.workload.choice(PROFILES)
    world.trace.emit("provider", "provider.profile", profile=provider.profile)
    provider.slow_replies = SLOW_REPLIES
    registry: Registry = {}
    for name in WORKERS:
        world.spawn(supervise, world, name, lambda proc: serve(world, proc), registry)
    requester = Requester(world, registry)
    world.actors["requester"] = requester
    await requester.run(world.streams.workload.randint(16, 24))
    await anyio.sleep(200.0)  # faults stay on while the workers reconcile


RESUBMIT_RACE = register(Scenario("resubmit_race", " ".join((__doc__ or "").split()), drive,
                                  heal, tune=_racy, vessel=False))
