"""The delivery relay: after startup, repeat bounded delivery recovery.

A QUEUED Run whose publication failed, whose acknowledgement was lost, or
whose broker job died with a previous boot is found here and recovered by
the same code startup uses (runtime.recovery.deliveries).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

import anyio

from runtime.engine import RunEngine
from runtime.models import RunStatus
from runtime.recovery.deliveries import DeliveryRecovery

log = logging.getLogger(__name__)

RELAY_EVERY_S = 5.0
PAGE_SIZE = 50


@dataclass
class DeliveryRelay:
    engine: RunEngine
    boot_cutoff: datetime
    every_s: float = RELAY_EVERY_S

    async def run_forever(self) -> None:
        while True:
            await anyio.sleep(self.every_s)
            await self.pass_once()

    async def pass_once(self) -> int:
        """One bounded sweep over QUEUED Runs; exceptions are isolated per Run."""
        recovery = DeliveryRecovery(self.engine, self.boot_cutoff)
        cursor: tuple[datetime, UUID] | None = None
        seen = 0
        while True:
            page = await self.engine.deps.ledger.page_runs((RunStatus.QUEUED,), cursor, PAGE_SIZE)
            for run in page:
                seen += 1
                try:
                    await recovery.recover(run)
                except Exception as exc:
                    log.warning("delivery relay: Run %s not recovered this pass: %r", run.id, exc)
            if len(page) < PAGE_SIZE:
                return seen
            cursor = (page[-1].updated_at, page[-1].id)
