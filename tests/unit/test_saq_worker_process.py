"""InProcessWorker keeps an error recording a job's end inside its process task."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
from saq import Worker

from runtime.adapters.saq.worker import InProcessWorker


@pytest.mark.anyio
async def test_a_finish_that_fails_is_logged_not_raised_out_of_the_task(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def finish_fails(self: Worker) -> bool:
        raise TimeoutError("couldn't get a connection after 3.00 sec")

    monkeypatch.setattr(Worker, "process", finish_fails)
    worker = InProcessWorker.__new__(InProcessWorker)
    worker.queue = SimpleNamespace(name="runs")  # type: ignore[assignment]
    with caplog.at_level(logging.ERROR, logger="runtime.adapters.saq.worker"):
        assert await worker.process() is True
    assert "could not record the end of a job on queue runs" in caplog.text


@pytest.mark.anyio
async def test_what_saq_s_process_answers_passes_through(monkeypatch: pytest.MonkeyPatch) -> None:
    async def no_job(self: Worker) -> bool:
        return False

    monkeypatch.setattr(Worker, "process", no_job)
    worker = InProcessWorker.__new__(InProcessWorker)
    assert await worker.process() is False
