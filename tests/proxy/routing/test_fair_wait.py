"""Teams waiting for an alias's capacity take it in turn: a team served more yields to one served less, a team
arriving mid-episode starts level with the least served, and a served waiter wakes the others."""

from __future__ import annotations

import asyncio

from proxy.routing.fair_wait import WaitRoom


def test_a_team_served_more_yields_to_one_served_less() -> None:
    room = WaitRoom()
    for _ in range(8):
        room.join("big")
    room.join("small")
    assert room.may_try("big") and room.may_try("small")  # nobody served yet: either may
    room.leave("big", served=True)
    assert not room.may_try("big") and room.may_try("small")  # big had its turn
    room.leave("small", served=True)  # small served: it leaves, nobody else of small waits
    assert room.may_try("big")
    room.join("small")  # a newcomer starts level with the least served (big: 1), not with a backlog
    assert room.may_try("big") and room.may_try("small")


def test_the_counts_end_with_the_episode() -> None:
    room = WaitRoom()
    room.join("a")
    room.leave("a", served=True)
    assert not room.waiting and not room.served
    room.join("a")
    room.join("b")
    assert room.may_try("a") and room.may_try("b")
    room.leave("a", served=False)  # gave up: not a turn taken
    room.leave("b", served=False)
    assert not room.waiting


def test_a_served_waiter_wakes_the_others() -> None:
    async def scenario() -> float:
        room = WaitRoom()
        room.join("a")
        room.join("b")
        loop = asyncio.get_running_loop()
        started = loop.time()
        waiter = asyncio.create_task(room.pause(5.0))
        await asyncio.sleep(0.01)
        room.leave("a", served=True)
        await waiter
        return loop.time() - started

    assert asyncio.run(scenario()) < 1.0
