"""Fairness between teams among the interactive requests waiting for provider capacity (``failover._next``).

When an alias's deployments are short of capacity, its interactive requests wait in the alias's ``WaitRoom``
and ask their candidates again when it is their turn. Without a rule, whoever asks first when capacity frees
wins: a team with fifty requests waiting takes fifty turns to another's one, and a request that just arrived
takes capacity from those that waited. The rule is start-time fair queuing with teams as the flows:

* a waiter holds a ticket (when it started waiting, wall clock; a sequence number breaks ties);
* the team whose turn it is: the fewest turns (times served) in this episode, then the oldest waiter;
* only that team's oldest waiter asks (every ``CAPACITY_STEP_S``); the others sleep until the room changes
  (someone served or gone, the other pods' view changed) or ``CAPACITY_STEP_MAX_S`` passes;
* a team that starts waiting while others wait starts level with the fewest turns among them (it gets its
  turns from now on, not a backlog of them); the counts end with the episode, when nobody waits;
* while anybody waits, a new request of the alias joins the room instead of asking first (no jumping the
  queue), and its answer counts as its team's turn.

Across pods (distributed mode, where the capacity is shared through Redis) the rooms of an alias are one room:
``proxy.routing.wait_sync`` publishes each pod's teams waiting, their turns and their oldest ticket, and hands
each room the others' (``remote``: team -> (waiting, turns, oldest ticket) over the other pods). A team's turns
are its turns on every pod. The view is at most a sync interval old; without Redis it is empty and each pod's
room is fair on its own. ``serve --workers`` keeps a room per process: there each process has its own share of
the capacity, so waiting for another process's turn would leave this one's share idle.

A waiter's candidates may differ from the head's (a key pinned to a region): the head's wait then holds the
others until it is served or gives up (its ``capacity_wait_s``); an alias's requests usually share them.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Callable

Ticket = tuple[float, int]  # (wall-clock start of the wait, sequence)
Remote = dict[str, tuple[int, int, float]]  # team -> (requests waiting, turns, oldest start), the other pods'
_NONE = (0, 0, float("inf"))


class WaitRoom:
    def __init__(self, wall: Callable[[], float] = time.time, changed: Callable[[], None] = lambda: None) -> None:
        self.waiting: dict[str, list[Ticket]] = {}  # team -> its tickets here, oldest first
        self.served: dict[str, int] = {}  # team -> turns here in this episode (waiting teams only)
        self.remote: Remote = {}
        self._wall = wall
        self._told = changed  # called when a waiter joins or leaves (wait_sync publishes at once)
        self._seq = itertools.count()
        self._changed: asyncio.Future[None] | None = None  # resolved when the room changes

    # -- what the waiters ask ----------------------------------------------------------------------------------

    def busy(self) -> bool:
        """Someone waits, here or on another pod."""
        return bool(self.waiting) or any(r[0] > 0 for r in self.remote.values())

    def turns(self, team: str) -> int:
        """The team's turns in this episode, here and on the other pods."""
        return self.served.get(team, 0) + self.remote.get(team, _NONE)[1]

    def teams_waiting(self) -> set[str]:
        """Every team with a request waiting, here or on another pod."""
        return set(self.waiting) | {t for t, r in self.remote.items() if r[0] > 0}

    def oldest(self, team: str) -> float:
        """When the team's oldest waiter, here or on another pod, started waiting."""
        mine = self.waiting.get(team)
        remote = self.remote.get(team, _NONE)
        return min(mine[0][0] if mine else float("inf"), remote[2] if remote[0] > 0 else float("inf"))

    def next_team(self) -> str | None:
        """The team whose turn it is: fewest turns, then the oldest waiter."""
        return min(self.teams_waiting(), key=lambda t: (self.turns(t), self.oldest(t), t), default=None)

    def may_try(self, team: str, ticket: Ticket) -> bool:
        """Is ``ticket`` the waiter whose turn it is? (Its team's, and the oldest of its team here and elsewhere.)"""
        mine = self.waiting.get(team)
        if not mine or mine[0] != ticket or self.next_team() != team:
            return False
        remote = self.remote.get(team, _NONE)
        return remote[0] <= 0 or ticket[0] <= remote[2]

    # -- joining and leaving -----------------------------------------------------------------------------------

    def join(self, team: str) -> Ticket:
        ticket = (self._wall(), next(self._seq))
        if team not in self.waiting and not self.remote.get(team, _NONE)[0]:  # new to the episode everywhere
            self.served[team] = max(self.served.get(team, 0), self._floor(team))
        self.waiting.setdefault(team, []).append(ticket)
        self._told()
        return ticket

    def leave(self, team: str, ticket: Ticket, served: bool) -> None:
        mine = self.waiting.get(team)
        if mine is None or ticket not in mine:
            return
        mine.remove(ticket)
        if served:
            self.served[team] = self.served.get(team, 0) + 1
        if not mine:
            del self.waiting[team]
            self.served.pop(team, None)
        if not self.waiting:
            self.served.clear()
        self.wake()
        self._told()

    def _floor(self, team: str) -> int:
        """The turns a team new to the episode starts with here: level with the fewest among the others."""
        floor = min((self.turns(t) for t in self.teams_waiting() if t != team), default=0)
        return floor - self.remote.get(team, _NONE)[1]

    # -- the other pods ----------------------------------------------------------------------------------------

    def set_remote(self, remote: Remote) -> None:
        """The other pods' waiting teams, as ``wait_sync`` last read them; the waiters re-check if it changed."""
        changed = remote != self.remote
        self.remote = remote
        if changed:
            self.wake()

    def summary(self) -> Remote:
        """What the other pods are told: each team waiting here, its requests, its turns here, its oldest."""
        return {t: (len(q), self.served.get(t, 0), q[0][0]) for t, q in self.waiting.items()}

    # -- sleeping ----------------------------------------------------------------------------------------------

    def wake(self) -> None:
        """Wake every sleeping waiter: the room changed, it may be somebody else's turn."""
        if self._changed is not None and not self._changed.done():
            self._changed.set_result(None)
        self._changed = None

    async def pause(self, seconds: float) -> None:
        """Sleep ``seconds``, or less if the room changes meanwhile."""
        if self._changed is None or self._changed.done():
            self._changed = asyncio.get_running_loop().create_future()
        try:
            await asyncio.wait_for(asyncio.shield(self._changed), seconds)
        except TimeoutError:
            pass
