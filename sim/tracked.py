"""TrackedTable: a dict that remembers which keys were written since it was last read.

The checker compares the ledger's Run and delivery rows after every committed
write with those it saw after the previous write (sim/checker.py). Scanning
both tables for that costs O(rows) per write, which made the `crowded`
scenario (hundreds of Runs at once) pay a seventh of its time in the scan.
The world's memory ledger keeps those two tables in TrackedTables instead: a
plain dict to the ledger (every read is dict's own C code; only writes pass
through Python), which also notes each key assigned or removed, so the checker
reads the few keys a write touched.

Guarantees, what the checker's equivalence with a full scan rests on:
- every mutation through any dict method (item assignment and deletion, pop,
  popitem, setdefault, update, |=, clear) marks its keys in `dirty`, until
  `settle()` clears them;
- `in_order(keys)` sorts keys as iterating the table would (dict order is
  insertion order; reassigning a key keeps its place, removing it forgets it),
  so the checker visits changed rows in the order a scan visits them.
A table replaced wholesale (`MemoryLedger.restore`, a plain dict) is not a
TrackedTable: the checker then scans it whole, as before.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import Any, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

_MISSING: Any = object()


class TrackedTable(dict[K, V]):
    __slots__ = ("_next", "_place", "dirty")

    def __init__(self, items: Mapping[K, V] | Iterable[tuple[K, V]] = ()) -> None:
        super().__init__()
        self.dirty: dict[K, None] = {}
        """Keys assigned or removed since the last `settle()` (an ordered set)."""
        self._place: dict[K, int] = {}
        self._next = 0
        self.update(items)

    def _mark(self, key: K) -> None:
        if key not in self._place:  # a new key goes to the end of the table
            self._place[key] = self._next
            self._next += 1
        self.dirty[key] = None

    def _forget(self, key: K) -> None:
        del self._place[key]
        self.dirty[key] = None

    def __setitem__(self, key: K, value: V) -> None:
        self._mark(key)
        super().__setitem__(key, value)

    def __delitem__(self, key: K) -> None:
        super().__delitem__(key)
        self._forget(key)

    def pop(self, key: K, default: Any = _MISSING) -> Any:
        if key in self:
            value = super().pop(key)
            self._forget(key)
            return value
        if default is _MISSING:
            raise KeyError(key)
        return default

    def popitem(self) -> tuple[K, V]:
        key, value = super().popitem()
        self._forget(key)
        return key, value

    def setdefault(self, key: K, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def __ior__(self, other: Any) -> TrackedTable[K, V]:  # type: ignore[override,misc]
        self.update(other)
        return self

    def clear(self) -> None:
        for key in list(self):
            del self[key]

    def in_order(self, keys: Iterable[K]) -> list[K]:
        """`keys` (all present in the table) in the table's iteration order."""
        return sorted(keys, key=self._place.__getitem__)

    def settle(self) -> None:
        """The reader has seen every change so far."""
        self.dirty.clear()

    def __reduce__(self) -> Any:  # copies and pickles are plain dicts, untracked
        return (dict, (dict(self),))
