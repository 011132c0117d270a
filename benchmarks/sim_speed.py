"""Simulator speed: simulated Runs per wall second and the virtual/wall ratio.

Run on demand: `python benchmarks/sim_speed.py [--seeds N]`. The baseline is
the `calm` profile measured in the same run, so the `swarm` line reads as a
ratio against it on this machine today.
"""

from __future__ import annotations

import argparse
import json
import logging
import time

from sim.kernel import run_simulation


def measure(profile: str, seeds: int) -> dict[str, float]:
    runs = 0
    virtual = 0.0
    started = time.perf_counter()
    for seed in range(1, seeds + 1):
        result = run_simulation(seed, "basic", profile)
        runs += result.runs
        virtual += result.virtual_s
    wall = time.perf_counter() - started
    return {"runs_per_s": runs / wall, "virtual_per_wall": virtual / wall, "wall_s": wall}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=100)
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    base = measure("calm", args.seeds)
    swarm = measure("swarm", args.seeds)
    print(f"calm  : {base['runs_per_s']:8.0f} simulated Runs/s  "
          f"{base['virtual_per_wall']:8.0f}x virtual/wall")
    print(f"swarm : {swarm['runs_per_s']:8.0f} simulated Runs/s  "
          f"{swarm['virtual_per_wall']:8.0f}x virtual/wall  "
          f"({swarm['runs_per_s'] / base['runs_per_s']:.2f} of calm)")
    print("RESULT " + json.dumps({"calm": base, "swarm": swarm}, sort_keys=True))


if __name__ == "__main__":
    main()
