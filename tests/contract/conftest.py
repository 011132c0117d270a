"""Fixtures of the contract suites: every Ledger implementation behind one fixture."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from runtime.seams import Ledger
from tests.contract.ledger_impls import LEDGER_KINDS, open_ledger


@pytest.fixture(params=LEDGER_KINDS)
async def ledger(request: pytest.FixtureRequest, anyio_backend: str) -> AsyncIterator[Ledger]:
    async with open_ledger(request.param, request, anyio_backend) as impl:
        yield impl
