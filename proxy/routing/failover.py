"""Trying candidates in order until one answers, before any byte reaches the caller.

Retryable failures (429, 5xx, timeouts, connection errors) move on to the
next candidate; a rejection (400, context length, policy, auth) ends the
request at once, since another deployment would fail the same way. Every
attempt is metered, failed or not.
"""

from __future__ import annotations

import time
from typing import Awaitable, Callable, Sequence, TypeVar

from proxy.admission.gate import reserve_deployment
from proxy.control.snapshot import Deployment
from proxy.errors import GatewayError, UpstreamError
from proxy.metering import Meter
from proxy.upstream.base import ChatResult

T = TypeVar("T")

MAX_ATTEMPTS = 3


async def first_answer(
    candidates: Sequence[Deployment],
    meter: Meter,
    attempt: Callable[[Deployment], Awaitable[T]],
) -> tuple[Deployment, T, float]:
    """(deployment, its answer, attempt start) of the first candidate that answers."""
    last: GatewayError | None = None
    tried = 0
    for dep in candidates:
        if tried >= MAX_ATTEMPTS:
            break
        # A deployment whose provider-limit mirror is spent is skipped without a call.
        short = await reserve_deployment(meter.rt, meter, dep)
        if short is not None:
            last = last if isinstance(last, UpstreamError) else short
            continue
        tried += 1
        started = time.monotonic()
        try:
            return dep, await attempt(dep), started
        except UpstreamError as exc:
            meter.attempted(dep, started=started, usage=None, error=exc)
            last = exc
            if not exc.retryable:
                break
    assert last is not None
    raise last


async def settled_answer(
    candidates: Sequence[Deployment],
    meter: Meter,
    attempt: Callable[[Deployment], Awaitable[ChatResult]],
) -> tuple[Deployment, ChatResult]:
    """A non-streaming answer, metered and settled whatever happens."""
    dep: Deployment | None = None
    status = 500
    try:
        dep, result, started = await first_answer(candidates, meter, attempt)
        meter.attempted(dep, started=started, usage=result.usage)
        status = 200
        return dep, result
    except GatewayError as exc:
        status = exc.status
        raise
    finally:
        meter.settle(status, dep)
