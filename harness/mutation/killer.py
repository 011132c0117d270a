"""The mutation killer: a focused simulator campaign, seeds in order, first violation wins.

Seed-major: seed 1 over every focus scenario, then seed 2, and so on up to
`--seeds`. The first simulation that is not `ok` (violation, deadlock, error)
kills the mutant; the seed index reached is its seeds-to-detection (what
`harness campaign --seeds 1-k` would have needed). The last stdout line is
one machine-readable verdict that `harness.mutation.report` parses from the
cosmic-ray session:

    MUTATION-VERDICT {"killed": true, "seeds": 3, "simulations": 7, ...}

Exit 1 when killed (cosmic-ray counts any non-zero exit as killed), 0 when
every simulation held. A mutant that breaks the import itself is killed at
seed 1 (the first seed would have failed).
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import time
from typing import Any

VERDICT_PREFIX = "MUTATION-VERDICT "
HANG_S = 60.0
"""Wall-clock bound of one simulation. The unmutated tree runs each in well
under 5 s even on a loaded machine; a mutant that live-locks the scheduler
(a zero poll interval: virtual time never advances) would otherwise hold the
whole session's timeout. Such a hang kills the mutant, like a timeout."""


class SimulationHang(BaseException):
    """Raised by the alarm inside a simulation that outlived HANG_S."""


def _alarm(signum: int, frame: object) -> None:
    raise SimulationHang()


def _emit(verdict: dict[str, Any]) -> int:
    print(VERDICT_PREFIX + json.dumps(verdict, sort_keys=True), flush=True)
    return 1 if verdict["killed"] else 0


def campaign(
    scenarios: list[str], seeds: int, profile: str, hang_s: float = HANG_S
) -> dict[str, Any]:
    """Run seeds 1..`seeds` over `scenarios` (seed-major); stop at the first failure
    (a simulation that outlives `hang_s` of wall time fails as a hang)."""
    from sim.clock import held_freeze
    from sim.kernel import run_simulation

    with held_freeze():  # one freezegun start for the run, not one per simulation
        return _campaign(run_simulation, scenarios, seeds, profile, hang_s)


def _campaign(run_simulation: Any, scenarios: list[str], seeds: int, profile: str,
              hang_s: float) -> dict[str, Any]:
    simulations = 0
    previous = signal.signal(signal.SIGALRM, _alarm)
    try:
        for seed in range(1, seeds + 1):
            for scenario in scenarios:
                simulations += 1
                signal.setitimer(signal.ITIMER_REAL, hang_s)
                try:
                    result = run_simulation(seed, scenario, profile)
                except SimulationHang:
                    return {"killed": True, "seeds": seed, "simulations": simulations,
                            "scenario": scenario, "seed": seed, "invariant": "hang",
                            "detail": f"one simulation outlived {hang_s:g} s of wall time"}
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                if not result.ok:
                    return {
                        "killed": True,
                        "seeds": seed,
                        "simulations": simulations,
                        "scenario": scenario,
                        "seed": seed,
                        "invariant": result.invariant,
                        "detail": (result.violation.message if result.violation
                                   else result.error) or "",
                    }
    finally:
        signal.signal(signal.SIGALRM, previous)
    return {"killed": False, "seeds": seeds, "simulations": simulations}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.mutation.killer")
    parser.add_argument("--scenarios", required=True, help="comma-separated focus scenarios")
    parser.add_argument("--seeds", type=int, required=True, help="seeds 1..N before surviving")
    parser.add_argument("--profile", default="swarm")
    args = parser.parse_args(argv)
    # The runtime logs every injected fault; the verdict is all the session needs.
    logging.disable(logging.CRITICAL)
    scenarios = [s for s in args.scenarios.split(",") if s]
    started = time.perf_counter()
    try:
        verdict = campaign(scenarios, args.seeds, args.profile)
    except Exception as exc:  # a mutant that breaks import or the kernel itself
        verdict = {
            "killed": True,
            "seeds": 1,
            "simulations": 1,
            "scenario": scenarios[0] if scenarios else "",
            "seed": 1,
            "invariant": "crash",
            "detail": f"{type(exc).__name__}: {exc}"[:300],
        }
    verdict["wall_s"] = round(time.perf_counter() - started, 2)
    return _emit(verdict)


if __name__ == "__main__":
    sys.exit(main())
