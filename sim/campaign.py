"""Campaigns: many seeds times scenarios, spread over worker processes.

Each seed runs in a worker process with nothing carried over from earlier
seeds (every simulation builds its world and reseeds the scheduler), so a
seed's result never depends on which seeds ran before it there.
"""

from __future__ import annotations

import logging
import multiprocessing
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from runtime.faults import CATALOGUE
from sim import breaks
from sim.clock import freeze_process, held_freeze, real_perf_counter
from sim.kernel import SimResult, run_simulation

SeedJob = tuple[int, str, str, str | None]


def parse_seeds(spec: str) -> list[int]:
    """`1-500`, `7`, or `1,2,10-12` -> seeds; ValueError says what is wrong."""
    seeds: list[int] = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        lo, dash, hi = part.partition("-")
        try:
            if dash:
                a, b = int(lo), int(hi)
                if a > b:
                    raise ValueError
                seeds.extend(range(a, b + 1))
            else:
                seeds.append(int(part))
        except ValueError:
            raise ValueError(f"bad seed range {part!r}: use N, N-M or a comma list") from None
    if not seeds:
        raise ValueError("no seeds given")
    return seeds


def parse_shard(spec: str) -> tuple[int, int]:
    """`K/N` (1 <= K <= N) -> (K, N); ValueError says what is wrong."""
    k, slash, n = spec.partition("/")
    try:
        if not slash:
            raise ValueError
        index, total = int(k), int(n)
    except ValueError:
        raise ValueError(f"bad shard {spec!r}: use K/N, e.g. 1/4") from None
    if total < 1 or not 1 <= index <= total:
        raise ValueError(f"bad shard {spec!r}: K must be between 1 and N (N >= 1)")
    return index, total


def plan(names: Iterable[str], seeds: list[int], profile: str) -> list[SeedJob]:
    """Every seed of every scenario (scenario by scenario, seeds in order) under
    `profile`, each with the break `SIM_BREAK` names, if any."""
    return [(s, n, profile, breaks.from_env()) for n in names for s in seeds]


def shard(jobs: list[SeedJob], index: int, total: int) -> list[SeedJob]:
    """Shard `index` of `total`: every `total`-th simulation from the `index`-th.

    A pure function of the job list, so N machines given the same list and
    K = 1..N run disjoint slices that together are the whole campaign; dealing
    round-robin spreads every scenario and seed range over all shards.
    """
    return jobs[index - 1 :: total]


def summarize(result: SimResult) -> dict[str, Any]:
    v = result.violation
    return {
        "seed": result.seed,
        "scenario": result.scenario,
        "profile": result.profile,
        "verdict": result.verdict,
        "invariant": result.invariant,
        "message": v.message if v else result.error,
        "records": v.records if v else {},
        "trace_hash": result.trace_hash,
        "coverage": result.coverage,
        "runs": result.runs,
        "boots": result.boots,
        "virtual_s": result.virtual_s,
        "wall_s": result.wall_s,
        "fired": len(result.fired.faults),
    }


def run_one(job: SeedJob) -> dict[str, Any]:
    seed, scenario, profile, break_name = job
    logging.disable(logging.CRITICAL)
    return summarize(run_simulation(seed, scenario, profile, break_name=break_name))


@dataclass
class CampaignReport:
    results: list[dict[str, Any]] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def failures(self) -> list[dict[str, Any]]:
        return [r for r in self.results if r["verdict"] != "ok"]

    def coverage(self) -> dict[str, Any]:
        hits: Counter[str] = Counter()
        fires: Counter[str] = Counter()
        kinds: Counter[str] = Counter()
        for r in self.results:
            hits.update(r["coverage"]["hits"])
            fires.update(r["coverage"]["fires"])
            kinds.update(r["coverage"]["kinds"])
        points = {p: {"hits": hits[p], "fires": fires[p]} for p in sorted(set(hits) | set(fires))}
        return {"points": points, "kinds": dict(sorted(kinds.items()))}

    def gaps(self) -> list[str]:
        """Catalogued fault points never fired in this campaign."""
        fired = self.coverage()["points"]
        return [p for p in CATALOGUE if fired.get(p, {}).get("fires", 0) == 0]

    def violations_by_invariant(self) -> dict[str, int]:
        return dict(sorted(Counter(str(r["invariant"]) for r in self.failures).items()))


def iterate(
    jobs: list[Any], workers: int, run: Callable[[Any], dict[str, Any]] | None = None
) -> Iterator[dict[str, Any]]:
    """Yield each seed's summary in job order, as soon as it and those before it finished.

    `run` turns one job into its summary (default `run_one`, looked up at call
    time); with several workers it must be a module-level function (it is pickled
    into spawned processes).
    """
    run = run or run_one
    if workers <= 1:
        # One freezegun start for the whole run, not one per seed (sim.clock.held_freeze):
        # the caller's code between yields reads real time through sim.clock.
        with held_freeze():
            for job in jobs:
                yield run(job)
        return
    ctx = multiprocessing.get_context("spawn")
    # Worker processes only simulate: freezegun is started once for each of them,
    # not once per seed (see sim.clock.freeze_process).
    with ProcessPoolExecutor(
        max_workers=workers, mp_context=ctx, initializer=freeze_process
    ) as pool:
        yield from pool.map(run, jobs, chunksize=CHUNK)


CHUNK = 2
"""Simulations handed to a worker at a time. A chunk of a sixteenth of the campaign
could leave one worker alone on the last long chunk (the `events` scenario costs ten
times `basic`); a simulation costs tens of milliseconds or more against well under one
for the hand-over, so small chunks bound the tail at one or two simulations."""


def run_campaign(
    jobs: list[Any], workers: int, on_result: Callable[[dict[str, Any]], None] | None = None,
    run: Callable[[Any], dict[str, Any]] | None = None,
) -> CampaignReport:
    started = real_perf_counter()
    report = CampaignReport()
    for result in iterate(jobs, workers, run):
        report.results.append(result)
        if on_result:
            on_result(result)
    report.wall_s = real_perf_counter() - started
    return report
