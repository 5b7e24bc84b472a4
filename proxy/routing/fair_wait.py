"""Fairness between teams among the interactive requests waiting for provider capacity (``failover._next``).

When an alias's deployments are short of capacity, its interactive requests wait in this process's
``WaitRoom`` for the alias and ask their candidates again after a pause. Without a rule, whoever asks first
when capacity frees wins, so a team with fifty requests waiting takes fifty turns to another's one. The rule:
a waiting request may ask only if no other team waiting here has been served fewer times in this episode
(start-time fair queuing, with teams as the flows): a team served more yields to one served less, and teams
take the capacity in turn, whatever their number of requests. A team that starts waiting while others wait
starts at the fewest served among them (it gets its turns from now on, not a backlog of them); the counts end
with the episode, when nobody waits. A request told to yield sleeps until someone is served (its team's turn
may have come) or its pause ends. Per process: with several processes or pods each keeps its own room.
"""

from __future__ import annotations

import asyncio
from collections import Counter


class WaitRoom:
    def __init__(self) -> None:
        self.waiting: Counter[str] = Counter()  # team -> requests waiting
        self.served: dict[str, int] = {}  # team -> times served in this episode (waiting teams only)
        self._served_now: asyncio.Future[None] | None = None  # resolved when a waiter is served

    def join(self, team: str) -> None:
        if not self.waiting[team]:
            floor = min((self.served[t] for t in self.waiting if self.waiting[t]), default=0)
            self.served[team] = max(self.served.get(team, 0), floor)
        self.waiting[team] += 1

    def leave(self, team: str, served: bool) -> None:
        self.waiting[team] -= 1
        if served:
            self.served[team] = self.served.get(team, 0) + 1
            if self._served_now is not None and not self._served_now.done():
                self._served_now.set_result(None)
            self._served_now = None
        if self.waiting[team] <= 0:
            del self.waiting[team]
            self.served.pop(team, None)
        if not self.waiting:
            self.served.clear()

    def may_try(self, team: str) -> bool:
        """No other waiting team has been served fewer times."""
        mine = self.served.get(team, 0)
        return all(self.served.get(t, 0) >= mine for t in self.waiting)

    async def pause(self, seconds: float) -> None:
        """Sleep ``seconds``, or less if a waiter is served meanwhile."""
        if self._served_now is None or self._served_now.done():
            self._served_now = asyncio.get_running_loop().create_future()
        try:
            await asyncio.wait_for(asyncio.shield(self._served_now), seconds)
        except TimeoutError:
            pass
