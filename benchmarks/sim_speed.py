"""Simulator speed, in figures comparable across runs and machines.

Run on demand: `python benchmarks/sim_speed.py [--seeds N] [--json out.json]
[--compare before.json] [--rss-seeds 1000]`. It prints, from one process:

- `reference`: a fixed pure-trio workload (tasks sleeping on a MockClock,
  formatting and hashing small records) that touches no code of this repo, so
  it measures the machine, not us;
- `swarm`: simulated Runs per CPU-second over every scenario under the
  `swarm` profile (the mix `make campaign` runs), and the same figure per
  reference-second (Runs simulated in the CPU time the reference takes), the
  number to compare across machines;
- `wait`: virtual seconds per CPU-second and per wall second on a wait-heavy
  mix (Runs parked on consent, hardware and service waits);
- with `--rss-seeds N`, the peak and the growth of resident memory over an
  N-seed in-process campaign of `basic` (it must stay flat);
- with `--jobs N`, the swarm mix once more through the campaign's pool of N
  worker processes (`sim.campaign.iterate`), each simulation timed in its
  worker: the wall time, each worker's start-up and simulation CPU, the
  parent's CPU, the `bound` (the CPU of all simulations over that of the
  busiest worker: the speed-up N otherwise idle cores would give) and the
  `cores` the workers obtained (their CPU over the wall time). On a shared
  machine `--jobs` wall ratios measure the neighbours; `bound` and `cores`
  tell the pool's own overhead from the CPU it could not get.

CPU time (`time.process_time`) is the denominator, not wall time: the machine
may be shared, and CPU time is what another process cannot steal from us.
`--compare` reads an earlier `--json` file and prints the before/after factor.

To see where the time goes: `py-spy record -f raw -o prof.txt -- .venv/bin/python
benchmarks/sim_speed.py --seeds 2` (py-spy is in the dev extras; an in-process
profiler is misled by freezegun, which fakes the clocks it reads).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

import trio
import trio.testing

from sim.clock import freeze_process, real_perf_counter
from sim.kernel import run_simulation
from sim.scenarios import resolve

WAIT_MIX = ("service_wait", "consent", "hardware")
REFERENCE_TASKS = 40
REFERENCE_STEPS = 500


async def _reference_task(i: int, sink: list[str]) -> None:
    h = hashlib.sha256()
    for step in range(REFERENCE_STEPS):
        await trio.sleep(((i * 7919 + step * 104729) % 97) / 10.0)
        line = json.dumps({"task": i, "step": step, "t": trio.current_time()}, sort_keys=True)
        h.update(line.encode())
    sink.append(h.hexdigest())


async def _reference_main() -> None:
    sink: list[str] = []
    async with trio.open_nursery() as nursery:
        for i in range(REFERENCE_TASKS):
            nursery.start_soon(_reference_task, i, sink)


def reference() -> dict[str, float]:
    """CPU seconds of the fixed trio workload (best of three: least disturbed)."""
    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        trio.run(_reference_main, clock=trio.testing.MockClock(autojump_threshold=0))
        best = min(best, time.process_time() - started)
    return {"cpu_s": best}


def measure(scenarios: list[str], seeds: int) -> dict[str, float]:
    runs = 0
    virtual = 0.0
    wall0, cpu0 = real_perf_counter(), time.process_time()
    for name in scenarios:
        for seed in range(1, seeds + 1):
            result = run_simulation(seed, name, "swarm")
            runs += result.runs
            virtual += result.virtual_s
    wall, cpu = real_perf_counter() - wall0, time.process_time() - cpu0
    return {
        "simulations": float(len(scenarios) * seeds),
        "runs": float(runs),
        "cpu_s": cpu,
        "wall_s": wall,
        "runs_per_cpu_s": runs / cpu,
        "virtual_per_cpu": virtual / cpu,
        "virtual_per_wall": virtual / wall,
    }


def timed_run(job: Any) -> dict[str, Any]:
    """One campaign job, with the CPU it took in its worker (module level: it is
    pickled into spawned workers)."""
    from sim.campaign import run_one

    before = time.process_time()
    summary = run_one(job)
    after = time.process_time()
    return {"cpu_s": after - before, "worker_cpu_before": before, "pid": os.getpid(),
            "runs": summary["runs"]}


def pool(scenarios: list[str], seeds: int, jobs: int) -> dict[str, float]:
    """The swarm mix through the campaign's pool of `jobs` workers."""
    from sim.campaign import iterate, plan

    work = plan(scenarios, list(range(1, seeds + 1)), "swarm")
    wall0, cpu0 = real_perf_counter(), time.process_time()
    timed = list(iterate(work, jobs, timed_run))
    wall, parent = real_perf_counter() - wall0, time.process_time() - cpu0
    workers: dict[int, list[dict[str, Any]]] = {}
    for t in timed:
        workers.setdefault(t["pid"], []).append(t)
    start = {pid: min(t["worker_cpu_before"] for t in ts) for pid, ts in workers.items()}
    busy = {pid: start[pid] + sum(t["cpu_s"] for t in ts) for pid, ts in workers.items()}
    sims = sum(t["cpu_s"] for t in timed)
    return {
        "jobs": float(jobs),
        "simulations": float(len(timed)),
        "wall_s": wall,
        "parent_cpu_s": parent if jobs > 1 else 0.0,
        "simulation_cpu_s": sims,
        "worker_startup_cpu_s": max(start.values()) if jobs > 1 else 0.0,
        "busiest_worker_cpu_s": max(busy.values()),
        "bound": sims / max(busy.values()),
        "cores": sum(busy.values()) / wall,
    }


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def rss(seeds: int) -> dict[str, float]:
    """Resident memory over an in-process campaign: after 10% of it, and the peak."""
    samples: list[int] = []
    for seed in range(1, seeds + 1):
        run_simulation(seed, "basic", "swarm")
        if seed % max(1, seeds // 10) == 0:
            samples.append(_rss_kib())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "seeds": float(seeds),
        "rss_first_kib": float(samples[0]),
        "rss_last_kib": float(samples[-1]),
        "peak_kib": float(peak),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5, help="seeds per scenario (swarm mix)")
    parser.add_argument("--wait-seeds", type=int, default=5, help="seeds per wait scenario")
    parser.add_argument("--rss-seeds", type=int, default=0, help="also measure RSS over N seeds")
    parser.add_argument("--jobs", type=int, default=0,
                        help="also run the swarm mix through a pool of N workers")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--compare", type=Path, help="an earlier --json file: print factors")
    args = parser.parse_args(argv)
    logging.disable(logging.CRITICAL)
    run_simulation(1, "basic", "calm")  # imports and registries: once per process, not measured
    figures: dict[str, Any] = {"reference": reference()}
    ref_cpu = figures["reference"]["cpu_s"]
    freeze_process()  # as in a campaign worker (the reference runs unfrozen: it reads real time)
    swarm = measure([s.name for s in resolve("all")], args.seeds)
    swarm["runs_per_ref_s"] = swarm["runs_per_cpu_s"] * ref_cpu
    figures["swarm"] = swarm
    wait = measure(list(WAIT_MIX), args.wait_seeds)
    wait["virtual_per_ref_s"] = wait["virtual_per_cpu"] * ref_cpu
    figures["wait"] = wait
    if args.rss_seeds:
        figures["rss"] = rss(args.rss_seeds)
    if args.jobs:
        figures["pool"] = pool([s.name for s in resolve("all")], args.seeds, args.jobs)
    _print(figures)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")
    if args.compare:
        _compare(json.loads(args.compare.read_text()), figures)
    return 0


def _print(f: dict[str, Any]) -> None:
    ref, swarm, wait = f["reference"], f["swarm"], f["wait"]
    print(f"reference : {ref['cpu_s']:8.3f} CPU-s for the fixed trio workload")
    print(f"swarm mix : {swarm['runs_per_cpu_s']:8.1f} simulated Runs per CPU-second "
          f"({swarm['runs']:.0f} Runs, {swarm['simulations']:.0f} simulations, "
          f"{swarm['cpu_s']:.1f} CPU-s, {swarm['wall_s']:.1f} wall-s)")
    print(f"            {swarm['runs_per_ref_s']:8.1f} simulated Runs per reference workload")
    print(f"wait mix  : {wait['virtual_per_cpu']:8.0f}x virtual/CPU  "
          f"{wait['virtual_per_wall']:8.0f}x virtual/wall  "
          f"({wait['virtual_per_ref_s']:.0f} virtual-s per reference workload)")
    if "rss" in f:
        r = f["rss"]
        print(f"rss       : {r['rss_first_kib'] / 1024:.0f} MiB after 10% of "
              f"{r['seeds']:.0f} seeds, {r['rss_last_kib'] / 1024:.0f} MiB at the end, "
              f"peak {r['peak_kib'] / 1024:.0f} MiB")
    if "pool" in f:
        p = f["pool"]
        print(f"pool      : --jobs {p['jobs']:.0f}: {p['simulations']:.0f} simulations in "
              f"{p['wall_s']:.1f} wall-s; workers' start-up {p['worker_startup_cpu_s']:.2f} "
              f"CPU-s each, busiest {p['busiest_worker_cpu_s']:.1f} of "
              f"{p['simulation_cpu_s']:.1f} CPU-s of simulations, parent "
              f"{p['parent_cpu_s']:.2f}; bound x{p['bound']:.2f}, {p['cores']:.2f} cores obtained")
    print("RESULT " + json.dumps(f, sort_keys=True))


def _compare(before: dict[str, Any], after: dict[str, Any]) -> None:
    rows = [
        ("swarm Runs per reference", "swarm", "runs_per_ref_s"),
        ("swarm Runs per CPU-s", "swarm", "runs_per_cpu_s"),
        ("wait virtual per reference", "wait", "virtual_per_ref_s"),
        ("wait virtual/CPU", "wait", "virtual_per_cpu"),
        ("wait virtual/wall", "wait", "virtual_per_wall"),
    ]
    for label, group, key in rows:
        b, a = before[group][key], after[group][key]
        print(f"{label:28}: before {b:10.1f}  after {a:10.1f}  x{a / b:6.2f}")


if __name__ == "__main__":
    sys.exit(main())
