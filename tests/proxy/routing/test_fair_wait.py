"""Teams waiting for an alias's capacity take it in turn: only the waiter whose turn it is asks (the team with the
fewest turns, then the oldest waiter), a team arriving mid-episode starts level with the fewest, the other pods'
waiters count (``remote``), and a change in the room wakes the sleepers."""

from __future__ import annotations

import asyncio
import itertools

from proxy.routing.fair_wait import WaitRoom


def room() -> WaitRoom:
    clock = itertools.count(1000)
    return WaitRoom(wall=lambda: float(next(clock)))  # every join a second later than the one before


def test_only_the_oldest_waiter_of_the_team_with_fewest_turns_asks() -> None:
    r = room()
    big = [r.join("big") for _ in range(8)]
    small = r.join("small")
    assert r.next_team() == "big"  # no turns yet: the oldest waiter's team
    assert r.may_try("big", big[0]) and not r.may_try("big", big[1]) and not r.may_try("small", small)
    r.leave("big", big[0], served=True)
    assert r.next_team() == "small" and r.may_try("small", small) and not r.may_try("big", big[1])
    r.leave("small", small, served=True)  # small served: it leaves, nobody else of small waits
    assert r.may_try("big", big[1])
    again = r.join("small")  # a newcomer starts level with the fewest turns (big: 1), not with a backlog
    assert r.turns("small") == 1 and r.next_team() == "big"  # a tie: the older waiter first
    r.leave("big", big[1], served=True)
    assert r.may_try("small", again)


def test_a_waiter_that_gives_up_passes_the_turn_and_the_counts_end_with_the_episode() -> None:
    r = room()
    a, b = r.join("a"), r.join("b")
    r.leave("a", a, served=False)  # gave up: not a turn taken
    assert r.may_try("b", b) and r.turns("b") == 0
    r.leave("b", b, served=True)
    assert not r.waiting and not r.served and not r.busy()
    r.leave("b", b, served=True)  # leaving twice is harmless
    assert not r.served


def test_turns_count_every_pod_and_a_team_waiting_elsewhere_holds_this_one_back() -> None:
    r = room()
    big = [r.join("big") for _ in range(4)]
    r.leave("big", big[0], served=True)  # big: one turn here
    r.set_remote({"lone": (1, 0, 5000.0)})  # another pod: lone waits, never served
    assert r.turns("big") == 1 and r.teams_waiting() == {"big", "lone"} and r.busy()
    assert not r.may_try("big", big[1])  # lone (0 turns) goes first, on its own pod
    r.set_remote({"big": (2, 3, 900.0)})  # lone served and gone; big served 3 times over there
    assert r.turns("big") == 4 and r.next_team() == "big"
    assert not r.may_try("big", big[1])  # big's oldest waiter is on the other pod (900 < 1001)
    r.set_remote({"big": (2, 3, 1500.0)})
    assert r.may_try("big", big[1])
    assert r.summary() == {"big": (3, 1, 1001.0)}  # what the other pods are told: waiting, turns here, oldest


def test_a_team_new_everywhere_starts_level_with_the_fewest_turns_anywhere() -> None:
    r = room()
    r.set_remote({"big": (5, 3, 10.0)})
    assert r.busy()
    lone = r.join("lone")
    assert r.turns("lone") == 3  # level with big's 3 turns on the other pod, not a backlog of 3
    assert not r.may_try("lone", lone)  # a tie goes to the older waiter: big's, on the other pod
    r.set_remote({"big": (5, 4, 10.0), "other": (1, 0, 20.0)})
    assert r.may_try("lone", lone) is False and r.next_team() == "other"  # other (0 turns) first
    mine = r.join("other")  # other also waits elsewhere: already in the episode, no floor for it
    assert r.turns("other") == 0 and not r.may_try("other", mine)  # its older waiter elsewhere asks first


def test_a_change_in_the_room_wakes_the_sleepers() -> None:
    async def scenario() -> list[float]:
        r = room()
        a = r.join("a")
        loop = asyncio.get_running_loop()
        woken = []
        for change in (lambda: r.set_remote({"b": (1, 0, 1.0)}), lambda: r.leave("a", a, served=True)):
            started = loop.time()
            sleeper = asyncio.create_task(r.pause(5.0))
            await asyncio.sleep(0.01)
            change()
            await sleeper
            woken.append(loop.time() - started)
        return woken

    assert all(w < 1.0 for w in asyncio.run(scenario()))


def test_joins_and_leaves_are_told() -> None:
    told = []
    r = WaitRoom(changed=lambda: told.append(len(r.waiting)))
    t = r.join("a")
    r.leave("a", t, served=True)
    assert told == [1, 0]
