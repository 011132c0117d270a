"""What `harness receipts` and the gate run: restart windows, leased-job checks and
the several-Vessel checks (harness.receipts.vessels)."""

from __future__ import annotations

from harness.receipts.leased_checks import LEASED_CHECKS, LeasedCheck
from harness.receipts.vessels import VESSEL_CHECKS
from harness.receipts.windows import WINDOWS, Window


def choose(
    names: list[str], everything: bool = False, leased: bool = True
) -> tuple[list[Window], list[LeasedCheck]]:
    """The windows and leased checks to run.

    No names (or `everything`): every window, every leased check unless
    `leased` is false, then every several-Vessel check. Otherwise each name is
    a window (`admit.committed`), a leased check (`leased.repeated_crashes`), a
    several-Vessel check (`vessels.two_on_one_database`) or a catalogued
    window a leased check proves (`job.inference_returned`); a named check
    runs even when `leased` is false. A KeyError names what is unknown.
    """
    if everything or not names:
        return list(WINDOWS.values()), [*(LEASED_CHECKS.values() if leased else ()),
                                        *VESSEL_CHECKS.values()]
    windows: list[Window] = []
    checks: list[LeasedCheck] = []
    unknown: list[str] = []
    every = [*LEASED_CHECKS.values(), *VESSEL_CHECKS.values()]
    for name in names:
        proving = [c for c in every if name in (c.name, c.proves)]
        if name in WINDOWS and WINDOWS[name] not in windows:
            windows.append(WINDOWS[name])
        checks += [c for c in proving if c not in checks]
        if name not in WINDOWS and not proving:
            unknown.append(name)
    if unknown:
        raise KeyError(f"unknown windows or leased checks {unknown}; known windows: "
                       f"{', '.join(WINDOWS)}; leased checks: {', '.join(LEASED_CHECKS)}; "
                       f"several-Vessel checks: {', '.join(VESSEL_CHECKS)}")
    return windows, checks
