"""`python -m harness.mutation`: the entry of `make mutation` and `make mutation-sample`.

Exit 0 done (and, with a threshold, the kill rate met it), 1 kill rate below
the threshold, 2 usage or environment error (bad config, killer not green on
the unmutated tree).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from harness.mutation import filters, report, run
from harness.mutation.config import load


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m harness.mutation")
    p.add_argument("--config", type=Path, default=run.ROOT / "ci/mutation.toml")
    p.add_argument("--out", type=Path, default=None, help="default out/mutation[-sample]")
    p.add_argument("--groups", default="", help="comma-separated groups (default: all, in order)")
    p.add_argument("--seeds", type=int, default=None, help="seeds per mutant (default: config)")
    p.add_argument("--sample", action="store_true",
                   help="a deterministic sample of the config's [mutation.sample] size")
    p.add_argument("--min-kill-rate", type=float, default=None,
                   help="exit 1 below it (default with --sample: the config's)")
    p.add_argument("--rerun-survivors", action="store_true",
                   help="re-judge the survivors of kept sessions (after the checker grew)")
    p.add_argument("--report-only", action="store_true", help="rewrite the report, run nothing")
    args = p.parse_args(argv)
    try:
        cfg = load(args.config)
        groups = ([cfg.group(n.strip()) for n in args.groups.split(",") if n.strip()]
                  or list(cfg.groups))
    except (ValueError, KeyError, OSError) as exc:
        print(f"mutation: {exc}", file=sys.stderr)
        return 2
    sample = cfg.sample if args.sample else None
    # Absolute: cosmic-ray runs inside OUT/tree, where a relative OUT names nothing.
    out = (args.out or run.ROOT / ("out/mutation-sample" if sample else "out/mutation")).resolve()
    seeds = args.seeds or (sample.seeds if sample else cfg.seeds)
    threshold = args.min_kill_rate if args.min_kill_rate is not None else (
        sample.min_kill_rate if sample else None)
    started = time.monotonic()
    if not args.report_only:
        tree, _ = run.prepare(out, cfg, groups, seeds, sample.size if sample else None,
                              sample.seed if sample else 0, args.rerun_survivors)
        live = [g for g in groups if report.pending(out, g)]
        scenarios = sorted({s for g in live for s in g.scenarios})
        if scenarios:
            print(f"mutation: baseline, seeds 1..{seeds} of {', '.join(scenarios)}", flush=True)
            run.baseline(tree, scenarios, seeds, cfg.profile)
        run.execute(out, tree, live)
    meta = {"profile": cfg.profile, "seeds": seeds, "sample": sample.size if sample else None,
            "sample_seed": sample.seed if sample else None,
            "wall_s_this_invocation": round(time.monotonic() - started, 1)}
    summary = report.write(out, groups, meta, filters.load_rules(run.ROOT / cfg.equivalents))
    rate = summary["kill_rate"]
    c = summary["counts"]
    print(f"mutation: kill rate {'n/a' if rate is None else f'{100 * rate:.1f}%'} "
          f"(killed {c['killed']}, timeout {c['timeout']}, survived {c['survived']}, "
          f"pending {c['pending']}); seeds-to-detection median "
          f"{summary['seeds_to_detection']['median']}; report {out / 'report.md'}")
    if threshold is not None and (rate is None or rate < threshold):
        print(f"mutation: FAIL: kill rate {rate} is below the threshold {threshold} "
              f"(survivors in {out / 'report.md'})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
