"""The attempt loop (``proxy.routing.failover``) in process: candidates tried in the chain's order, each
failure handled by its verdict, every attempt metered once, the admission step (``clear``) asked before
each call. The meter and the ``clear`` step are fakes: routing sees only the ``Tries`` it is handed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from dataclasses import dataclass, field

import pytest

from ledger.usage import TokenUsage
from proxy.errors import GatewayError, RateLimited, UpstreamRateLimited, UpstreamRejected, UpstreamUnavailable
from proxy.routing.chain import Chain
from proxy.routing.failover import Tries, first_answer
from proxy.routing.router import Needs
from proxy.routing.state import RoutingState
from proxy.snapshot import Deployment
from tests.proxy.fakes import snapshot

OPENAI, ANTHROPIC = "sim-openai-mumbai", "sim-anthropic-mumbai"


@dataclass
class Tape:
    """A meter that writes down each attempt: (deployment, error code or None, usage input)."""

    seen: list[tuple[str, str | None, int]] = field(default_factory=list)

    waits: list[tuple[float, bool]] = field(default_factory=list)
    in_rooms: dict[str, int] = field(default_factory=dict)  # alias -> requests in its wait room now

    def attempted(self, dep, *, started, usage, error=None, ttft_s=None, status=None) -> int:  # type: ignore[no-untyped-def]
        self.seen.append((dep.id, getattr(error, "code", None), (usage or TokenUsage()).input))
        return 0

    def waited(self, seconds: float, served: bool) -> None:
        self.waits.append((seconds, served))

    def in_room(self, alias: str, delta: int) -> None:
        self.in_rooms[alias] = self.in_rooms.get(alias, 0) + delta


def setup(max_attempts: int = 3, cleared: dict[str, GatewayError | None] | None = None,  # type: ignore[no-untyped-def]
          capacity_wait_s: float = 0.0):
    snap = snapshot()
    alias = dataclasses.replace(snap.aliases["chat-default"], capacity_wait_s=capacity_wait_s)
    cands = [snap.deployments[OPENAI], snap.deployments[ANTHROPIC]]
    chain = Chain(cands, max_attempts, alias, snap, Needs((), "internal", 10))
    tape = Tape()
    asked: list[str] = []

    async def clear(dep: Deployment) -> GatewayError | None:
        asked.append(dep.id)
        return (cleared or {}).get(dep.id)

    tries = Tries(tape, clear, RoutingState(), random.Random(0), est_input=42)
    return cands, chain, tries, tape, asked


def answers(script: dict[str, BaseException | str]):  # type: ignore[no-untyped-def]
    calls: list[str] = []

    async def attempt(dep: Deployment) -> str:
        calls.append(dep.id)
        outcome = script[dep.id]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    return attempt, calls


async def test_a_5xx_fails_over_to_the_next_candidate() -> None:
    cands, chain, tries, tape, asked = setup()
    attempt, calls = answers({OPENAI: UpstreamUnavailable("down"), ANTHROPIC: "hello"})
    dep, answer, _ = await first_answer(cands, chain, tries, attempt, streaming=False)
    assert (dep.id, answer, calls, asked) == (ANTHROPIC, "hello", [OPENAI, ANTHROPIC], [OPENAI, ANTHROPIC])
    assert tape.seen == [(OPENAI, "provider_unavailable", 0)]  # the winner is metered by the caller


async def test_a_400_stops_with_the_providers_answer() -> None:
    cands, chain, tries, tape, _ = setup()
    attempt, calls = answers({OPENAI: UpstreamRejected("context too long"), ANTHROPIC: "never"})
    with pytest.raises(UpstreamRejected):
        await first_answer(cands, chain, tries, attempt, streaming=False)
    assert calls == [OPENAI] and len(tape.seen) == 1


async def test_a_429_pauses_the_deployment_and_moves_on() -> None:
    cands, chain, tries, _, _ = setup()
    attempt, _ = answers({OPENAI: UpstreamRateLimited("slow", retry_after=30), ANTHROPIC: "ok"})
    dep, _, _ = await first_answer(cands, chain, tries, attempt, streaming=False)
    assert dep.id == ANTHROPIC
    assert tries.state.blocked(cands[0], tries.state.clock()) == "paused"


async def test_a_deployment_admission_does_not_clear_is_skipped_without_a_call() -> None:
    short = RateLimited("Deployment full", code="provider_capacity")
    cands, chain, tries, tape, asked = setup(cleared={OPENAI: short})
    attempt, calls = answers({OPENAI: "never", ANTHROPIC: "ok"})
    dep, _, _ = await first_answer(cands, chain, tries, attempt, streaming=False)
    assert dep.id == ANTHROPIC and calls == [ANTHROPIC] and asked == [OPENAI, ANTHROPIC] and tape.seen == []


async def test_nothing_cleared_answers_with_the_admission_refusal() -> None:
    short = RateLimited("Deployment full", code="provider_capacity")
    cands, chain, tries, _, _ = setup(cleared={OPENAI: short, ANTHROPIC: short})
    attempt, calls = answers({OPENAI: "never", ANTHROPIC: "never"})
    with pytest.raises(RateLimited) as err:
        await first_answer(cands, chain, tries, attempt, streaming=False)
    assert err.value.code == "provider_capacity" and calls == []


async def test_a_request_short_of_capacity_waits_for_it_a_bounded_time() -> None:
    """Every candidate's mirror spent: asked again every 25 ms (alone in the room, it is its turn); the first
    that clears is called."""
    short = RateLimited("Deployment full", code="provider_capacity")
    cands, chain, tries, tape, asked = setup(capacity_wait_s=2.0)
    refusals = {OPENAI: 3, ANTHROPIC: 10**6}

    async def clear(dep: Deployment) -> GatewayError | None:
        asked.append(dep.id)
        refusals[dep.id] -= 1
        return short if refusals[dep.id] >= 0 else None

    tries.clear = clear
    attempt, calls = answers({OPENAI: "at last", ANTHROPIC: "never"})
    started = time.monotonic()
    dep, answer, _ = await first_answer(cands, chain, tries, attempt, streaming=False)
    assert (dep.id, answer, calls, tape.seen) == (OPENAI, "at last", [OPENAI], [])  # no call, no attempt before
    assert asked.count(OPENAI) == 4 and time.monotonic() - started < 1.0  # three pauses of 25 ms
    [(seconds, served)] = tape.waits
    assert served and 0.07 <= seconds < 1.0


async def test_a_request_still_short_after_its_wait_is_refused_with_retry_after() -> None:
    short = RateLimited("Deployment full", code="provider_capacity", headers={"Retry-After": "1"})
    cands, chain, tries, tape, asked = setup(cleared={OPENAI: short, ANTHROPIC: short}, capacity_wait_s=0.3)
    attempt, calls = answers({OPENAI: "never", ANTHROPIC: "never"})
    started = time.monotonic()
    with pytest.raises(RateLimited) as err:
        await first_answer(cands, chain, tries, attempt, streaming=False)
    waited = time.monotonic() - started
    assert err.value.code == "provider_capacity" and err.value.headers["Retry-After"] == "1" and calls == []
    assert 0.3 <= waited < 1.0 and len(asked) > 2  # asked again while the wait lasted, then refused
    [(seconds, served)] = tape.waits
    assert not served and seconds >= 0.29


async def test_a_request_that_was_tried_does_not_wait_for_capacity() -> None:
    """After a failed attempt, a spent mirror on the next candidate ends the request at once (the failure is the
    answer): waiting is for requests no provider has seen yet."""
    short = RateLimited("Deployment full", code="provider_capacity")
    cands, chain, tries, _, asked = setup(cleared={ANTHROPIC: short}, capacity_wait_s=5.0)
    attempt, _ = answers({OPENAI: UpstreamUnavailable("down"), ANTHROPIC: "never"})
    started = time.monotonic()
    with pytest.raises(UpstreamUnavailable):
        await first_answer(cands, chain, tries, attempt, streaming=False)
    assert time.monotonic() - started < 1.0 and asked == [OPENAI, ANTHROPIC]


async def test_max_attempts_bounds_the_tries() -> None:
    cands, chain, tries, tape, _ = setup(max_attempts=1)
    attempt, calls = answers({OPENAI: UpstreamUnavailable("down"), ANTHROPIC: "ok"})
    with pytest.raises(UpstreamUnavailable):
        await first_answer(cands, chain, tries, attempt, streaming=False)
    assert calls == [OPENAI] and len(tape.seen) == 1


async def test_a_cancelled_attempt_is_metered_with_the_estimated_input() -> None:
    cands, chain, tries, tape, _ = setup()
    started = asyncio.Event()

    async def attempt(dep: Deployment) -> str:
        started.set()
        await asyncio.sleep(10)
        return "late"

    task = asyncio.ensure_future(first_answer(cands, chain, tries, attempt, streaming=False))
    await started.wait()
    task.cancel("client_closed")
    with pytest.raises(asyncio.CancelledError):
        await task
    assert tape.seen == [(OPENAI, "client_gone", 42)]


async def test_while_others_wait_a_new_request_waits_its_turn_and_a_batch_request_does_not() -> None:
    """Another team waits on the alias: a new interactive request joins the room instead of asking first (it asks
    once the other is served); a batch request, whose capacity was taken before it was admitted, goes at once."""
    cands, chain, tries, tape, asked = setup(capacity_wait_s=2.0)
    room = tries.state.wait_room(chain.alias.name)
    other = room.join("another-team")
    attempt, calls = answers({OPENAI: "ok", ANTHROPIC: "never"})
    mine = asyncio.create_task(first_answer(cands, chain, tries, attempt, streaming=False))
    await asyncio.sleep(0.1)
    assert not mine.done() and asked == [] and room.waiting.keys() == {"another-team", ""}
    assert tape.in_rooms == {chain.alias.name: 1}  # the gauge: the new request is in the room
    batch = dataclasses.replace(tries, queued=False)
    dep, answer, _ = await first_answer(cands, chain, batch, attempt, streaming=False)
    assert (dep.id, answer, asked) == (OPENAI, "ok", [OPENAI])
    room.leave("another-team", other, served=True)  # its turn came and went: now the new request's
    dep, answer, _ = await asyncio.wait_for(mine, 1.0)
    assert (dep.id, answer, asked) == (OPENAI, "ok", [OPENAI, OPENAI]) and not room.waiting
    assert tape.in_rooms == {chain.alias.name: 0}
    assert tape.waits and tape.waits[-1][1]  # it paused: a wait, served
