"""The first answer of a chain of candidates: a whole answer, or an opened stream.

``settled_answer`` runs routing's attempt loop (``failover.first_answer``) over the candidates, records the
answering attempt on the request's meter and settles the request once: 200 with the answer, the error's status
when every candidate failed, 499 when the caller left (the task was cancelled).

``first_stream`` opens a stream the same way; the relay (``proxy.upstream.streaming``) records and settles it.
When no stream opens, the request is settled here: the error's status, or when cancelled, what
``cancelled_status`` says (499 for a caller that left, 503 for a pod that drained).
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Protocol, Sequence, TypeVar

from ledger.usage import TokenUsage
from proxy.errors import GatewayError
from proxy.routing.chain import Chain
from proxy.routing.failover import Tries, first_answer
from proxy.snapshot import Deployment


class Answer(Protocol):
    usage: TokenUsage


A = TypeVar("A", bound=Answer)


class SettlingMeter(Protocol):
    """The request's meter (``proxy.metering.meter.Meter``): one attempt recorded, the request settled once."""

    def attempted(self, dep: Deployment, *, started: float, usage: TokenUsage | None) -> int: ...

    def settle(self, final_status: int, dep: Deployment | None) -> None: ...


async def settled_answer(
    meter: SettlingMeter, cands: Sequence[Deployment], chain: Chain, tries: Tries,
    attempt: Callable[[Deployment], Awaitable[A]],
) -> tuple[Deployment, A]:
    """The first answer of the chain; the request is settled before this returns or raises."""
    dep: Deployment | None = None
    status = 500
    try:
        dep, result, started = await first_answer(cands, chain, tries, attempt, streaming=False)
        meter.attempted(dep, started=started, usage=result.usage)
        status = 200
        return dep, result
    except GatewayError as exc:
        status = exc.status
        raise
    except asyncio.CancelledError:
        status = 499
        raise
    finally:
        meter.settle(status, dep)


async def first_stream(
    meter: SettlingMeter, cands: Sequence[Deployment], chain: Chain, tries: Tries,
    attempt: Callable[[Deployment], Awaitable[Any]], cancelled_status: Callable[[], int],
) -> tuple[Deployment, Any, float]:
    """(deployment, its opened stream, when the attempt started); settled here only if none opened."""
    try:
        return await first_answer(cands, chain, tries, attempt, streaming=True)
    except GatewayError as exc:
        meter.settle(exc.status, None)
        raise
    except asyncio.CancelledError:
        meter.settle(cancelled_status(), None)
        raise
