"""How a test-only break is declared and applied: a name, a target, a patch.

A break replaces one attribute (a method, a function, a constant) of the
runtime or of the simulated world's memory stores; a rule guarded twice (by a
caller and by a CAS) needs companion patches too, one bug written in both
places. `sim.breaks` and `sim.rule_breaks` each declare theirs in a
`BreakTable`, and `sim.breaks.BREAKS` merges them into the one catalogue that
`SIM_BREAK` names. A table remembers each target as the unbroken code has it
(`unbroken`), so a replacement that keeps most of the original calls it
through the table, and `applied` restores exactly what it replaced.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, NamedTuple, TypeVar, cast

F = TypeVar("F")


class Patch(NamedTuple):
    """`owner.attr` replaced by `replacement` while a break is applied."""

    owner: object
    attr: str
    replacement: object


class BreakTable(Mapping[str, Patch]):
    """Breaks by name, each one patch, the companions it needs, and its target's original."""

    def __init__(
        self,
        patches: Mapping[str, tuple[object, str, object]],
        companions: Mapping[str, list[tuple[object, str, object]]] | None = None,
    ) -> None:
        self._patches = {name: Patch(*p) for name, p in patches.items()}
        self._originals: dict[str, Any] = {
            name: getattr(p.owner, p.attr) for name, p in self._patches.items()}
        self._found: dict[int, Any] = {}
        """`unbroken` answers by id of the replacement (a replacement may be unhashable)."""
        self.companions: dict[str, list[Patch]] = {}
        for name, extra in (companions or {}).items():
            self.pair(name, *extra)

    def __getitem__(self, name: str) -> Patch:
        return self._patches[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._patches)

    def __len__(self) -> int:
        return len(self._patches)

    def unbroken(self, replacement: F) -> F:
        """What `replacement` stands in for, as it was when its break was declared."""
        if id(replacement) in self._found:
            return cast(F, self._found[id(replacement)])
        targets = {(id(p.owner), p.attr): name for name, p in self._patches.items()
                   if p.replacement is replacement}
        if len(targets) != 1:
            raise LookupError(f"{replacement!r} replaces {len(targets)} targets, not one")
        [name] = targets.values()
        self._found[id(replacement)] = self._originals[name]
        return cast(F, self._originals[name])

    def pair(self, name: str, *patches: tuple[object, str, object]) -> None:
        """Break `name` also needs `patches` (applied after its own, in this order)."""
        self.companions.setdefault(name, []).extend(Patch(*p) for p in patches)

    def merge(self, other: BreakTable) -> None:
        """Take every break of `other`; a name declared twice is a mistake."""
        clash = set(self._patches) & set(other._patches)
        if clash:
            raise ValueError(f"breaks declared twice: {', '.join(sorted(clash))}")
        self._patches.update(other._patches)
        self._originals.update(other._originals)
        self._found.clear()
        for name, extra in other.companions.items():
            self.pair(name, *extra)

    @contextmanager
    def applied(self, name: str) -> Iterator[None]:
        """Break `name` (its patch, then its companions) for the duration, then restore."""
        if name not in self._patches:
            raise KeyError(f"unknown break {name!r}; known: {', '.join(self._patches)}")
        patches = [self._patches[name], *self.companions.get(name, [])]
        # Remember what the owner itself held: an inherited method (MemoryLedger's
        # readmit_after_service lives on WaitsMixin) is restored by deleting the
        # patch, never by copying it onto the owner, which would shadow the base
        # class for every later patch of it in the same process.
        missing = object()
        originals = [(owner, attr, vars(owner).get(attr, missing)) if isinstance(owner, type)
                     else (owner, attr, getattr(owner, attr)) for owner, attr, _ in patches]
        for owner, attr, replacement in patches:
            setattr(owner, attr, replacement)
        try:
            yield
        finally:
            for owner, attr, original in reversed(originals):
                if original is missing:
                    delattr(owner, attr)
                else:
                    setattr(owner, attr, original)
