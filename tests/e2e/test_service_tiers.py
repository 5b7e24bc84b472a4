"""The service tier a provider says it served prices the attempt: OpenAI's flex and priority at the
deployment's tier prices (``price_per_1m.tiers``), the standard tier at its own, and the event says which."""

from __future__ import annotations

from decimal import Decimal

import openai
import pytest

from ledger.events import RequestAttempted, RequestSettled
from tests.harness import Stack, read_events

pytestmark = pytest.mark.e2e
PRICES = {None: ("2.00", "0.20", "10.00"), "flex": ("1.00", "0.10", "5.00"), "priority": ("3.50", "0.35", "17.50")}


def _micro(usage, tier) -> int:
    p = [Decimal(x) for x in PRICES[tier]]
    usd = (usage.input * p[0] + usage.cached_input * p[1] + (usage.output + usage.reasoning) * p[2]) / 1_000_000
    return int((usd * 88 * 1_000_000).to_integral_value(rounding="ROUND_CEILING"))


@pytest.mark.parametrize(("asked", "header", "served"), [
    (None, None, None), ("flex", None, "flex"), ("priority", None, "priority"), ("auto", "priority", "priority"),
])
@pytest.mark.parametrize("stream", [False, True])
def test_the_tier_served_prices_the_attempt(client: openai.OpenAI, stack: Stack, asked, header, served, stream):
    extra = {"service_tier": asked} if asked else {}
    headers = {"x-sim-service-tier": header, "x-sim-cached-tokens": "4"} if header else {"x-sim-cached-tokens": "4"}
    msgs = [{"role": "user", "content": "price my tier"}]
    if stream:
        with client.chat.completions.with_streaming_response.create(
                model="chat-openai", messages=msgs, stream=True, stream_options={"include_usage": True},
                extra_body=extra, extra_headers=headers) as s:
            rid = s.headers["x-fb-request-id"]
            list(s.iter_lines())
    else:
        raw = client.chat.completions.with_raw_response.create(model="chat-openai", messages=msgs, extra_body=extra,
                                                                extra_headers=headers)
        rid = raw.headers["x-fb-request-id"]
    events = [e for e in read_events(stack.events_path) if getattr(e, "request_id", None) == rid]
    (attempt,) = [e for e in events if isinstance(e, RequestAttempted)]
    (settled,) = [e for e in events if isinstance(e, RequestSettled)]
    assert attempt.usage.service_tier == served and attempt.usage.cached_input == 4
    assert attempt.cost_micro == settled.cost_micro == _micro(attempt.usage, served)
