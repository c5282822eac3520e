"""Fault-injection actors, enabled only by ``GPUPLANE_TESTING_ACTORS`` (tests and demos).

``GPUPLANE_TESTING_ACTORS="flaky:2,doomed:99"`` adds an actor ``flaky`` that raises right
after each of its first 2 starts and then runs quietly, and one ``doomed`` that always
raises (so it ends FATAL). They exercise the real supervisor inside a real daemon.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs
import trio

from gpuplaned.runtime.context import ActorContext
from gpuplaned.runtime.spec import ActorSpec

ENV_VAR = "GPUPLANE_TESTING_ACTORS"


class InjectedCrash(RuntimeError):
    pass


@attrs.frozen
class FlakyStats:
    starts: int
    crashes_left: int


@attrs.define
class _Flaky:
    crashes: int
    starts: int = 0

    def statistics(self) -> FlakyStats:
        return FlakyStats(self.starts, max(0, self.crashes - self.starts + 1))

    async def run(self, ctx: ActorContext, *, task_status: trio.TaskStatus[_Flaky] = trio.TASK_STATUS_IGNORED) -> None:
        self.starts += 1
        task_status.started(self)
        if self.starts <= self.crashes:
            raise InjectedCrash(f"injected crash {self.starts} of {self.crashes}")
        await ctx.stop_requested.wait()


def testing_specs(env: Mapping[str, str]) -> list[ActorSpec]:
    """Specs named by the environment variable; ValueError names a malformed entry."""
    raw = env.get(ENV_VAR, "").strip()
    specs = []
    for entry in filter(None, (part.strip() for part in raw.split(","))):
        name, _, count = entry.partition(":")
        if not name.isidentifier() or not count.isdigit():
            raise ValueError(f"{ENV_VAR}: expected name:crashes, got {entry!r}")
        flaky = _Flaky(int(count))
        specs.append(ActorSpec(name, flaky.run, frozenset({"all", "server", "agent"}),
                               startsecs=0.2, max_restarts=3, max_seconds=30.0,
                               backoff_initial=0.1, graceful_stop=True, stop_grace=1.0))
    return specs
