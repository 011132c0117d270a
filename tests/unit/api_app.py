"""A small application for tests of the public harness API (harness.api).

`app` delivers letters through an idempotent post office; `flaky_app`'s node
asserts `always(False, ...)` on its third letter; `unreachable_app` reaches an
`unreachable`; `broken_check_app` has an invariant whose check raises;
`never_app` declares a `sometimes` that is never true.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import anyio

from harness.api import App, Arrival, Env, Invariant, View, Workload, always, sometimes, unreachable
from runtime.hop import HopContext
from runtime.registry import Node, Pattern, WorkflowRegistry


@dataclass
class PostOffice:
    env: Env
    delivered: dict[str, int] = field(default_factory=dict)

    async def deliver(self, letter: str) -> None:
        await anyio.sleep(round(self.env.rng.uniform(0.1, 1.0), 3))
        self.delivered[letter] = self.delivered.get(letter, 0) + 1


def _registry(mode: str) -> Any:
    def build(env: Env) -> WorkflowRegistry:
        post: PostOffice = env.service("post")

        async def send(ctx: HopContext, state: dict[str, Any]) -> dict[str, Any]:
            letter = str(state["letter"])
            sometimes(letter.endswith("-1"), "the second letter is sent")
            if mode == "always" and letter.endswith("-2"):
                always(False, "letters before the third", letter=letter)
            if mode == "unreachable" and letter.endswith("-2"):
                unreachable("the third letter")
            sometimes(mode != "never", "a letter is sent in a mode other than never")
            await post.deliver(letter)
            return {**state, "sent": True}

        registry = WorkflowRegistry()
        registry.register(Pattern(name="letter", version=1, nodes=(Node("send", send),)))
        return registry

    return build


def letter(rng: Any, i: int) -> dict[str, Any]:
    return {"letter": f"letter-{i}"}


WORKLOAD = Workload(arrivals=(Arrival("letter", letter, keyed=1.0),), count=(4, 6),
                    replays=0.0)


def delivered_at_most_once(view: View) -> str | None:
    post: PostOffice = view.service("post")
    twice = sorted(k for k, n in post.delivered.items() if n > 1)
    return f"delivered twice: {twice}" if twice else None


def _raises(view: View) -> str | None:
    raise KeyError("no such field")


def _app(name: str, mode: str, extra: tuple[Invariant, ...] = ()) -> App:
    return App(name=name, registry=_registry(mode), workload=WORKLOAD,
               invariants=(Invariant("delivered_at_most_once", delivered_at_most_once), *extra),
               services={"post": PostOffice}, ref=f"tests.unit.api_app:{name}")


app = _app("app", "ok")
flaky_app = _app("flaky_app", "always")
unreachable_app = _app("unreachable_app", "unreachable")
never_app = _app("never_app", "never")
broken_check_app = _app("broken_check_app", "ok", (Invariant("raises", _raises),))
