"""Patterns shipped with the runtime for tests, scenarios and demos."""

from __future__ import annotations

from runtime.patterns.basic import CHATTY, ECHO, TWO_STEP
from runtime.patterns.waits import (
    CONSENT_GATE,
    DELEGATE,
    EFFECTFUL,
    ERRANDS,
    HARDWARE,
    SERVICE_CALL,
)
from runtime.registry import WorkflowRegistry


def default_registry() -> WorkflowRegistry:
    registry = WorkflowRegistry()
    for pattern in (ECHO, TWO_STEP, CHATTY, CONSENT_GATE, DELEGATE, HARDWARE, EFFECTFUL,
                    SERVICE_CALL, ERRANDS):
        registry.register(pattern)
    return registry


__all__ = [
    "CHATTY",
    "CONSENT_GATE", "DELEGATE", "ECHO", "EFFECTFUL", "ERRANDS", "HARDWARE", "SERVICE_CALL",
    "TWO_STEP",
    "default_registry",
]
