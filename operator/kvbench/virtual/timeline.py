"""One virtual clock for several engines and their clients: a discrete-event simulation.

Each engine core decides its steps on its own (`EngineCore.step`); the timeline only chooses
whose turn it is. The next thing to happen is the earliest of: a client event (a send that is
due, a response that completes, a user who has finished thinking) and an engine's next
decision (its clock while it has work, else its next arrival). Processing in that order is
exact: a step decided at time t can only see requests that arrived by t, and every request
that arrives by t was sent by an event before t (a step takes time, and so does the frontend
on the way in), which has then been processed already. A response is delivered as an event
at its finish time, not when its step was computed, so clients act, and a Service draws its
random choices, in the order of simulated time.

Most steps are one decode token for every running request. An engine runs through such
steps in one call (`EngineCore.decode_steps`) up to
a limit no request it has not seen can beat: the earliest pending event or other engine's
next decision, plus its frontend latency (a request sent then reaches its engine no sooner).
The result is the same as one step at a time (`stepwise`), which the tests compare.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Sequence

from kvbench.sim.engine import EngineCore

__all__ = ["Timeline"]


class Timeline:
    """Engines and client events on one virtual clock, starting at `start` (seconds)."""

    def __init__(self, cores: Sequence[EngineCore], start: float, stepwise: bool = False) -> None:
        self.cores = list(cores)
        self.now = start
        self.stepwise = stepwise
        self._events: list[tuple[float, int, Callable[[float], None]]] = []
        self._seq = itertools.count()

    def at(self, when: float, action: Callable[[float], None]) -> None:
        """Run `action(when)` once the clock reaches `when` (never in the past)."""
        heapq.heappush(self._events, (max(when, self.now), next(self._seq), action))

    def run(self) -> None:
        """Process events and engine steps until nothing is left to do."""
        events, cores = self._events, self.cores
        while True:
            when, core = math.inf, None
            for candidate in cores:
                if candidate.busy:
                    t = candidate.clock
                else:
                    arrival = candidate.next_arrival_time()
                    if arrival is None:
                        continue
                    t = arrival if arrival > candidate.clock else candidate.clock
                if t < when:
                    when, core = t, candidate
            if events and events[0][0] <= when:
                at, _, action = heapq.heappop(events)
                self.now = at
                action(at)
                continue
            if core is None:
                return
            steps = core.num_steps
            if not self.stepwise and core.scheduler.running:
                finished, end = core.decode_steps(self._unseen_before(core))
            if core.num_steps == steps:
                result = core.step()
                if result is None:
                    continue
                finished, end = result.finished, result.end
            for request in finished:
                notify = request.notify
                if notify is not None:
                    heapq.heappush(
                        events, (end, next(self._seq), lambda _t, r=request, n=notify: n(r))
                    )

    def _unseen_before(self, core: EngineCore) -> float:
        """The earliest time a request `core` has not been given could reach it: sends come
        from pending events and from other engines' steps, none of them earlier than the
        first event or another engine's next decision, and take the frontend latency. On a
        shared GPU, also another engine's next decision: a step that starts after it runs
        beside that engine's."""
        first = self._events[0][0] if self._events else math.inf
        decision = math.inf
        for other in self.cores:
            if other is core:
                continue
            if other.busy:
                decision = min(decision, other.clock)
            else:
                arrival = other.next_arrival_time()
                if arrival is not None:
                    decision = min(decision, max(arrival, other.clock))
        limit = min(first, decision) + core.cost.frontend_s
        # On a shared GPU another engine's next step prices this one's from its start.
        return min(limit, decision) if core.gpu is not None else limit
