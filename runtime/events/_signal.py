"""A level-triggered wake-up shared by the channel and the writer."""

from __future__ import annotations

import anyio


class Signal:
    """Waiters sleep until the next `notify`; they then re-check their condition."""

    def __init__(self) -> None:
        self._event: anyio.Event | None = None

    def notify(self) -> None:
        if self._event is not None:
            self._event.set()
            self._event = None

    async def wait(self) -> None:
        if self._event is None:
            self._event = anyio.Event()
        await self._event.wait()
