"""WorkflowRegistry (Patterns by name and pinned version) and QueueRouter.

Admission asks the registry for the Pattern an Intent names and the router
for its lane and doctrine priority (seed 000_81a5c720b14d934a.txt,
"Admission and exact claim", step 1). A replay never consults either again:
already admitted truth is not re-routed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from runtime.errors import InvalidIntent, UnknownPattern
from runtime.models import Intent

if TYPE_CHECKING:
    from runtime.hop import HopContext

QUEUES = ("runs", "rites")

NodeFn = Callable[["HopContext", Any], Awaitable[Any]]
"""A node takes the hop context and the state so far and returns the new state,
or `(state, transition)` (runtime.graph.transitions)."""


@dataclass(frozen=True)
class Node:
    name: str
    run: NodeFn


@dataclass(frozen=True)
class Pattern:
    """A registered workflow definition, pinned by version."""

    name: str
    version: int
    nodes: tuple[Node, ...]
    queue: str | None = None
    state_model: type[BaseModel] | None = None
    """Typed state; None keeps the state a plain JSON dict."""

    def __post_init__(self) -> None:
        if not self.nodes:
            raise ValueError(f"Pattern {self.name} has no nodes")

    @property
    def start(self) -> str:
        return self.nodes[0].name

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(f"Pattern {self.name}@{self.version} has no node {name!r}")

    def after(self, name: str) -> str | None:
        names = [n.name for n in self.nodes]
        i = names.index(name)
        return names[i + 1] if i + 1 < len(names) else None

    def initial_state(self, content: dict[str, Any]) -> Any:
        return self.decode(dict(content))

    def decode(self, data: dict[str, Any]) -> Any:
        """Typed state from its JSON form; raises pydantic.ValidationError."""
        if self.state_model is None:
            return dict(data)
        return self.state_model.model_validate(data)

    @staticmethod
    def encode(state: Any) -> dict[str, Any]:
        if isinstance(state, BaseModel):
            return state.model_dump(mode="json")
        return dict(state)


@dataclass
class WorkflowRegistry:
    _patterns: dict[tuple[str, int], Pattern] = field(default_factory=dict)

    def register(self, pattern: Pattern) -> Pattern:
        self._patterns[(pattern.name, pattern.version)] = pattern
        return pattern

    def latest(self, name: str) -> Pattern:
        versions = [v for (n, v) in self._patterns if n == name]
        if not versions:
            raise UnknownPattern(name)
        return self._patterns[(name, max(versions))]

    def pinned(self, name: str, version: int) -> Pattern | None:
        return self._patterns.get((name, version))

    def names(self) -> list[str]:
        return sorted({n for (n, _) in self._patterns})


def check_priority(field_name: str, value: int) -> int:
    if not 0 <= value <= 100:
        raise InvalidIntent(field_name, f"priority must be within 0-100, got {value}")
    return value


@dataclass(frozen=True)
class RoutingRule:
    """Send Patterns named `pattern` (or every Pattern when None) to a lane."""

    queue: str
    priority: int
    pattern: str | None = None

    def __post_init__(self) -> None:
        if self.queue not in QUEUES:
            raise InvalidIntent("queue", f"unknown queue {self.queue!r}; expected one of {QUEUES}")
        check_priority("priority", self.priority)


@dataclass(frozen=True)
class Route:
    queue: str
    priority: int


@dataclass(frozen=True)
class QueueRouter:
    rules: Sequence[RoutingRule] = ()
    default: RoutingRule = RoutingRule(queue="runs", priority=50)

    def route(self, intent: Intent, pattern: Pattern) -> Route:
        rule = next(
            (r for r in self.rules if r.pattern in (None, pattern.name)),
            self.default,
        )
        queue = pattern.queue or rule.queue
        priority = rule.priority if intent.priority is None else intent.priority
        return Route(queue=queue, priority=check_priority("priority", priority))
