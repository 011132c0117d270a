"""The SAQ broker adapter (production only: asyncio, SAQ 0.26 on PostgreSQL)."""

from runtime.adapters.saq.broker import AbortObservation, SaqBroker, SaqSettings, observe_abort
from runtime.adapters.saq.queue import VesselQueue
from runtime.adapters.saq.worker import InProcessWorker, WorkerStopFailed

__all__ = [
    "AbortObservation",
    "InProcessWorker",
    "SaqBroker",
    "SaqSettings",
    "VesselQueue",
    "WorkerStopFailed",
    "observe_abort",
]
