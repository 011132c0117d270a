"""sim.clock.held_freeze: one freezegun start around a run of in-process simulations
(`--jobs 1` campaigns, the rules sweep) gives the traces of unnested freezes, real
wall-clock figures for the harness, and real time again once the block ends."""

from __future__ import annotations

import datetime
import time

from freezegun import api

from sim.campaign import plan, run_campaign
from sim.clock import EPOCH, held_freeze, real_monotonic, real_perf_counter
from sim.kernel import run_simulation


def test_simulations_inside_a_held_freeze_trace_as_unnested_ones() -> None:
    alone = [run_simulation(3, s, "swarm").trace_hash for s in ("basic", "restart_storm")]
    with held_freeze():
        assert api.freeze_factories, "the freeze is held inside the block"
        held = [run_simulation(3, s, "swarm").trace_hash for s in ("basic", "restart_storm")]
    assert held == alone


def test_time_is_frozen_inside_and_real_after() -> None:
    with held_freeze():
        assert datetime.datetime.now() == EPOCH.replace(tzinfo=None)
        before = real_perf_counter()
        time.sleep(0.01)
        assert real_perf_counter() - before >= 0.01
        assert real_monotonic() > 0
    assert not api.freeze_factories
    assert type(datetime.datetime.now()) is api.real_datetime


def test_a_nested_held_freeze_leaves_the_outer_one_running() -> None:
    with held_freeze():
        depth = len(api.freeze_factories)
        with held_freeze():
            assert len(api.freeze_factories) == depth
        assert len(api.freeze_factories) == depth


def test_a_one_process_campaign_reports_real_wall_time_and_the_same_hashes() -> None:
    work = plan(["basic"], [1, 2], "swarm")
    report = run_campaign(work, 1)
    assert report.wall_s > 0
    assert [r["trace_hash"] for r in report.results] == [
        run_simulation(s, "basic", "swarm").trace_hash for s in (1, 2)]
    assert not api.freeze_factories
