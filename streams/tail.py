"""``farebox events tail``: one readable line per event, and following a log.

The CLI (in ``farebox/``) opens a log, calls ``follow`` and prints
``format_event`` of each item; this module knows nothing of argument parsing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from functools import singledispatch

from ledger.codec import format_time
from ledger.events import (
    ConfigPublished,
    ConfigRollout,
    Event,
    HoldExpired,
    LeaseEvent,
    RequestAdmitted,
    RequestAttempted,
    RequestSettled,
)
from ledger.usage import TokenUsage
from pricing.money import format_money
from streams.eventlog import EventLog


def format_event(offset: int, event: Event) -> str:
    """``offset  time  type  subject  facts`` on one line."""
    subject = event.request_id or event.key or "-"
    return f"{offset:>8}  {format_time(event.time)}  {event.type:<17}  {subject}  {_facts(event)}".rstrip()


def _scopes(amounts: object, currency: str) -> str:
    return " ".join(f"{scope}={format_money(micro, currency)}" for scope, micro in amounts.items())  # type: ignore[attr-defined]


def _tokens(usage: TokenUsage) -> str:
    parts = [f"in={usage.input}"]
    for label, value in (("cached", usage.cached_input), ("cache_write", usage.cache_write)):
        if value:
            parts.append(f"{label}={value}")
    parts.append(f"out={usage.output}")
    if usage.reasoning:
        parts.append(f"reasoning={usage.reasoning}")
    if usage.source != "provider":
        parts.append(f"({usage.source})")
    return " ".join(parts)


@singledispatch
def _facts(event: Event) -> str:
    return ""


@_facts.register
def _(event: RequestAdmitted) -> str:
    run = f" run={event.run_id}" if event.run_id else ""
    return (
        f"team={event.team} key={event.key_id} app={event.app}{run} alias={event.alias} "
        f"class={event.data_class} est_in={event.est_input_tokens} max_out={event.max_output_tokens} "
        f"hold[{_scopes(event.holds, event.currency)}] v{event.price_version} pod={event.pod}"
        + (" stream" if event.stream else "")
    )


@_facts.register
def _(event: RequestAttempted) -> str:
    ttft = f" ttft={event.ttft_ms}ms" if event.ttft_ms is not None else ""
    error = f" error={event.error_code}" if event.error_code else ""
    return (
        f"#{event.attempt} {event.deployment} {event.outcome} {event.status} {_tokens(event.usage)} "
        f"{format_money(event.cost_micro, event.currency)} v{event.price_version}{ttft} "
        f"latency={event.latency_ms}ms{error}"
    )


@_facts.register
def _(event: RequestSettled) -> str:
    overrun = f" OVERRUN={format_money(event.overrun_micro, event.currency)}" if event.overrun_micro else ""
    return (
        f"{event.final_status} team={event.team} {event.deployment or '-'} attempts={event.attempts} "
        f"{_tokens(event.usage)} {format_money(event.cost_micro, event.currency)}"
        + (" cache_hit" if event.cache_hit else "")
        + f" released[{_scopes(event.hold_released, event.currency)}]{overrun} latency={event.latency_ms}ms"
    )


@_facts.register
def _(event: HoldExpired) -> str:
    return f"team={event.team} charged[{_scopes(event.charged, event.currency)}]"


@_facts.register
def _(event: LeaseEvent) -> str:
    expires = f" expires={format_time(event.expires_at)}" if event.expires_at else ""
    return f"lease={event.lease_id} pod={event.pod} amount_micro={event.amount_micro}{expires}"


@_facts.register
def _(event: ConfigPublished) -> str:
    return f"version={event.version} hash={event.content_hash}"


@_facts.register
def _(event: ConfigRollout) -> str:
    return f"rollout={event.rollout_id} {event.action} stage={event.stage_pct}% version={event.version}: {event.reason}"


async def follow(
    log: EventLog,
    after: int = 0,
    poll_s: float = 0.5,
    *,
    stop: Callable[[], bool] = lambda: False,
) -> AsyncIterator[tuple[int, Event]]:
    """Yield every event after ``after`` in order, then poll for new ones (until ``stop()`` once drained)."""
    while True:
        batch = await log.read(after=after)
        for offset, event in batch:
            yield offset, event
            after = offset
        if not batch:
            if stop():
                return
            await asyncio.sleep(poll_s)
