"""Fixtures every real-process restart test shares."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.receipts.process import VesselProcess


@pytest.fixture
def processes() -> Iterator[list[VesselProcess]]:
    """Servers a test started: each is killed at teardown, whatever failed."""
    started: list[VesselProcess] = []
    yield started
    for process in started:
        process.kill()
