"""TrackedTable (sim/tracked.py): every mutation marks its keys, and `in_order`
sorts keys as iterating the table does, whatever the history of the table."""

from __future__ import annotations

import random

import pytest

from sim.tracked import TrackedTable


def _mutate(t: dict[int, int], rng: random.Random) -> set[int]:
    """One random mutation through any dict method; returns the keys it touched."""
    op = rng.randrange(8)
    k = rng.randrange(12)
    if op == 0:
        t[k] = rng.randrange(100)
        return {k}
    if op == 1 and k in t:
        del t[k]
        return {k}
    if op == 2:
        t.pop(k, None)
        return {k}
    if op == 3 and t:
        key, _ = t.popitem()
        return {key}
    if op == 4:
        t.setdefault(k, rng.randrange(100))
        return {k}
    if op == 5:
        items = {rng.randrange(12): 1 for _ in range(3)}
        t.update(items)
        return set(items)
    if op == 6:
        other = {rng.randrange(12): 2}
        t |= other
        return set(other)
    if op == 7 and rng.random() < 0.1:
        keys = set(t)
        t.clear()
        return keys
    return set()


def test_every_mutation_is_marked_and_order_follows_the_table() -> None:
    for seed in range(300):
        rng = random.Random(seed)
        table: TrackedTable[int, int] = TrackedTable({3: 0, 1: 0})
        mirror: dict[int, int] = {3: 0, 1: 0}
        table.settle()
        for _ in range(60):
            before = dict(table)
            state = rng.getstate()
            _mutate(table, rng)
            rng.setstate(state)
            _mutate(mirror, rng)
            assert list(table.items()) == list(mirror.items())
            changed = {k for k in set(before) | set(table) if before.get(k, -1) != table.get(k, -1)}
            assert changed <= set(table.dirty)  # nothing that changed goes unmarked
            assert table.in_order(table) == list(table)
            if rng.random() < 0.3:
                table.settle()
                assert not table.dirty


def test_pop_of_a_missing_key_raises_or_gives_the_default() -> None:
    table: TrackedTable[str, int] = TrackedTable()
    assert table.pop("x", 7) == 7
    with pytest.raises(KeyError):
        table.pop("x")
    assert not table.dirty


def test_copies_are_plain_dicts() -> None:
    import copy
    import pickle

    table: TrackedTable[str, int] = TrackedTable({"a": 1})
    for clone in (copy.copy(table), pickle.loads(pickle.dumps(table)), dict(table)):
        assert type(clone) is dict and clone == {"a": 1}
