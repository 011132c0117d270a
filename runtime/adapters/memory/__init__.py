"""In-memory adapters: the simulator's durable state and the local profile."""

from runtime.adapters.memory.broker import MemoryBroker
from runtime.adapters.memory.effects import MemoryEffectSink
from runtime.adapters.memory.ledger import MemoryLedger

__all__ = ["MemoryBroker", "MemoryEffectSink", "MemoryLedger"]
