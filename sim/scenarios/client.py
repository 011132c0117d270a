"""The simulated client: an external actor that submits Intents over the
process boundary and keeps what it still owes across crashes."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar
from uuid import UUID

import anyio

from runtime.engine import RetentionHook
from runtime.errors import (
    HeldWithoutOwner,
    IdempotencyConflict,
    LedgerUnavailable,
    RetentionFailed,
    RuntimeEngineError,
    SessionBusy,
)
from runtime.models import Intent, Run
from sim.delivery_checks import content_digest
from sim.world import Boot, Unavailable, World

T = TypeVar("T")


@dataclass
class Submit:
    intent: Intent
    held: bool = False
    via: int | None = None
    """In a world of several Vessels: which serving Vessel (by index, modulo those
    serving) takes the request; None: the live boot."""


@dataclass
class Client:
    world: World
    rng: random.Random
    owed: list[Submit] = field(default_factory=list)
    admitted: dict[UUID, Submit] = field(default_factory=dict)
    """Keyed submissions by the Run they admitted: what a replay sends again (sim.pause)."""
    retention_fails: float = 0.1

    def _hook(self, healed: bool, done: list[UUID]) -> RetentionHook:
        """The call's retention hook; it appends the Run to `done` once it completed."""
        rng = self.rng
        delay = round(rng.uniform(0.0, 2.0), 3)
        fail = not healed and rng.random() < self.retention_fails

        async def retain(run: Run) -> None:
            await anyio.sleep(delay)
            if fail:
                raise RuntimeError("caller could not retain its admission context")
            self.world.trace.emit("client", "retain.done", run=str(run.id))
            done.append(run.id)

        return retain

    async def submit(self, sub: Submit) -> str:
        """One attempt; returns the outcome name and records it in the trace."""
        retained: list[UUID] = []
        retain = self._hook(self.world.injector.healed, retained) if sub.held else None
        intent = sub.intent
        run_id = None
        checks = self.world.checker.admission_checks
        since = len(self.world.trace.lines)
        prior = checks.admitted_before(intent)
        try:
            result = await self._request(
                sub, lambda boot: boot.engine.submit(intent, checks.watched(boot, retain)))
            outcome, run_id = "admitted", str(result.run.id)
            checks.submit_returned(result, since)
            checks.pins_latest(self.world.registry, intent, result, None)
            if intent.idempotency_key is not None:
                self.admitted.setdefault(result.run.id, sub)
        except (Unavailable, LedgerUnavailable) as exc:
            outcome = type(exc).__name__
            if intent.idempotency_key is not None:
                self.owed.append(sub)
        except RuntimeEngineError as exc:
            outcome = type(exc).__name__
            checks.pins_latest(self.world.registry, intent, None, exc)
            if isinstance(exc, IdempotencyConflict | HeldWithoutOwner):
                run_id = str(exc.run_id)  # the admission it was refused against
            if isinstance(exc, IdempotencyConflict):
                checks.conflict_names_key(exc, intent)
            if isinstance(exc, SessionBusy):
                checks.session_busy(exc, intent, prior)
            if isinstance(exc, RetentionFailed):
                checks.retention_failed(retained, since)
        self.world.trace.emit(
            "client", "submit.result", key=intent.idempotency_key, outcome=outcome,
            run_id=run_id, fingerprint=intent.fingerprint(), held=sub.held,
            content=content_digest(intent),
        )
        await checks.probe_invalid(intent)
        return outcome

    async def _request(self, sub: Submit, fn: Callable[[Boot], Awaitable[T]]) -> T:
        serving = [b for b in self.world.boots if b.alive and b.ready and not b.frozen
                   and not b.stopping.is_set()] if sub.via is not None else []
        if not serving:
            return await self.world.request(fn)
        assert sub.via is not None
        return await serving[sub.via % len(serving)].call(fn)

    async def settle_debts(self, attempts: int = 50) -> None:
        """Retry every keyed submission whose outcome was lost, until it has one."""
        for _ in range(attempts):
            if not self.owed:
                return
            owed, self.owed = self.owed, []
            for sub in owed:
                await self.submit(sub)
            if self.owed:
                await anyio.sleep(10)
