"""Patterns shipped with the runtime for tests, scenarios and demos."""

from __future__ import annotations

from runtime.patterns.basic import ECHO, TWO_STEP
from runtime.registry import WorkflowRegistry


def default_registry() -> WorkflowRegistry:
    registry = WorkflowRegistry()
    for pattern in (ECHO, TWO_STEP):
        registry.register(pattern)
    return registry


__all__ = ["ECHO", "TWO_STEP", "default_registry"]
