"""`echo` (one node) and `two_step` (a node, then an external effect)."""

from __future__ import annotations

from typing import Any

import anyio

from runtime.hop import HopContext
from runtime.registry import Node, Pattern


async def _echo(ctx: HopContext, state: dict[str, Any]) -> dict[str, Any]:
    return {**state, "echo": ctx.run.intent.prompt}


async def _prepare(ctx: HopContext, state: dict[str, Any]) -> dict[str, Any]:
    return {**state, "prepared": True}


async def _apply_effect(ctx: HopContext, state: dict[str, Any]) -> dict[str, Any]:
    applied = await ctx.effect("deliver", {"prompt": ctx.run.intent.prompt})
    return {**state, "effect": ctx.effect_identity("deliver"), "effect_applied_now": applied}


ECHO = Pattern(name="echo", version=1, nodes=(Node("echo", _echo),))
TWO_STEP = Pattern(
    name="two_step",
    version=1,
    nodes=(Node("prepare", _prepare), Node("apply_effect", _apply_effect)),
)


async def _speak(ctx: HopContext, state: dict[str, Any]) -> dict[str, Any]:
    """Stream `tokens` live-only token deltas, a little apart."""
    count = int(state.get("tokens", 50))
    for i in range(count):
        await ctx.token(f"t{i}")
        await anyio.sleep(0.05)
    return {**state, "spoken": count}


CHATTY = Pattern(name="chatty", version=1, nodes=(Node("speak", _speak),))
