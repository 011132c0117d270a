"""Scenario `late_transmission` (quarantined): the `service` world, with three in ten
transmissions travelling 1-15 s before they reach the provider. Meanwhile the attempt
is SUBMITTING: a lookup finds no job and a cancel finds nothing to contain, both
truthfully at that instant, and the transmission lands afterwards (seed 000, "Service
job attempts": CANCELLED means containment is proved; re-submit only when evidence
proves no effect occurred)."""

from __future__ import annotations

from sim.scenarios import Scenario, register, service
from sim.world import World

IN_FLIGHT = 0.3
"""Share of transmissions that land 1-15 s after they were sent."""

GAP = (
    "a transmission still in flight is not covered by the driver's proofs: the runtime "
    "takes a lookup's absence (lookup_proves_absence) or a cancel that found nothing to "
    "contain as proof while the attempt is SUBMITTING, settles CANCELLED or re-submits, and "
    "the late transmission then starts a job (swarm seeds 2, 5, 16: service_cancel_contained; "
    "21: service_single_effect)"
)


async def drive(world: World) -> None:
    world.provider.in_flight = IN_FLIGHT
    await service.drive(world)


LATE_TRANSMISSION = register(Scenario(
    "late_transmission", " ".join((__doc__ or "").split()), drive, service.heal,
    vessel=False, quarantined=GAP))
