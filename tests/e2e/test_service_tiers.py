"""The service tier a provider says it served prices the attempt: OpenAI's ``service_tier``, Bedrock's
``serviceTier`` and Gemini's ``trafficType`` at the deployment's tier prices (``price_per_1m.tiers``), the
standard tier at its own, and the event says which."""

from __future__ import annotations

from decimal import Decimal

import openai
import pytest

from ledger.events import RequestAttempted, RequestSettled
from tests.harness import Stack, read_events

pytestmark = pytest.mark.e2e
PRICES = {None: ("2.00", "0.20", "10.00"), "flex": ("1.00", "0.10", "5.00"), "priority": ("3.50", "0.35", "17.50")}
# examples/farebox.yaml's prices (input, cached input, output) per tier of the cloud deployments
CLOUD = {
    "chat-bedrock": {None: ("0.80", "0.20", "3.20"), "flex": ("0.40", "0.10", "1.60"), "priority": ("1.40", "0.35", "5.60")},
    "chat-gemini": {None: ("0.30", "0.03", "2.50"), "flex": ("0.15", "0.015", "1.25"), "priority": ("0.54", "0.054", "4.50")},
}  # fmt: skip


def _micro(usage, tier, prices=PRICES) -> int:
    p = [Decimal(x) for x in prices[tier]]
    usd = (usage.input * p[0] + usage.cached_input * p[1] + (usage.output + usage.reasoning) * p[2]) / 1_000_000
    return int((usd * 88 * 1_000_000).to_integral_value(rounding="ROUND_CEILING"))


def _call(client: openai.OpenAI, alias: str, stream: bool, extra: dict, headers: dict) -> str:
    """The request id of one chat request (read to its end)."""
    msgs = [{"role": "user", "content": "price my tier"}]
    if stream:
        with client.chat.completions.with_streaming_response.create(
                model=alias, messages=msgs, stream=True, stream_options={"include_usage": True},
                extra_body=extra, extra_headers=headers) as s:
            list(s.iter_lines())
            return s.headers["x-fb-request-id"]
    raw = client.chat.completions.with_raw_response.create(model=alias, messages=msgs, extra_body=extra,
                                                            extra_headers=headers)
    return raw.headers["x-fb-request-id"]


def _priced(stack: Stack, rid: str) -> tuple[RequestAttempted, RequestSettled]:
    events = [e for e in read_events(stack.events_path) if getattr(e, "request_id", None) == rid]
    (attempt,) = [e for e in events if isinstance(e, RequestAttempted)]
    (settled,) = [e for e in events if isinstance(e, RequestSettled)]
    return attempt, settled


@pytest.mark.parametrize(("asked", "header", "served"), [
    (None, None, None), ("flex", None, "flex"), ("priority", None, "priority"), ("auto", "priority", "priority"),
])
@pytest.mark.parametrize("stream", [False, True])
def test_the_tier_served_prices_the_attempt(client: openai.OpenAI, stack: Stack, asked, header, served, stream):
    extra = {"service_tier": asked} if asked else {}
    headers = {"x-sim-cached-tokens": "4", **({"x-sim-service-tier": header} if header else {})}
    attempt, settled = _priced(stack, _call(client, "chat-openai", stream, extra, headers))
    assert attempt.usage.service_tier == served and attempt.usage.cached_input == 4
    assert attempt.cost_micro == settled.cost_micro == _micro(attempt.usage, served)


@pytest.mark.parametrize(("alias", "asked", "header", "served"), [
    ("chat-bedrock", None, None, None), ("chat-bedrock", "flex", None, "flex"),
    ("chat-bedrock", "priority", None, "priority"), ("chat-bedrock", "default", "priority", "priority"),
    ("chat-gemini", None, None, None), ("chat-gemini", None, "priority", "priority"),
    ("chat-gemini", "auto", "flex", "flex"),
])
@pytest.mark.parametrize("stream", [False, True])
def test_bedrock_and_gemini_tiers_price_the_attempt(client: openai.OpenAI, stack: Stack, alias, asked, header,
                                                    served, stream):
    """Bedrock is asked through ``serviceTier`` and answers with it (answer and stream metadata alike); Gemini
    names the tier that served in ``usageMetadata.trafficType`` (``x-sim-service-tier`` makes the simulator serve
    a tier it was not asked for)."""
    headers = {"x-sim-cached-tokens": "4", **({"x-sim-service-tier": header} if header else {})}
    attempt, settled = _priced(stack, _call(client, alias, stream, {"service_tier": asked} if asked else {}, headers))
    assert attempt.usage.service_tier == served and attempt.usage.cached_input == 4
    assert attempt.cost_micro == settled.cost_micro == _micro(attempt.usage, served, CLOUD[alias])


def test_the_gemini_api_has_no_tier_to_ask_for(client: openai.OpenAI):
    """Only Vertex AI takes a tier per request (tests/e2e/test_cloud_providers.py asks it); the Gemini API's
    deployment refuses one by name, before anything is sent."""
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="chat-gemini", messages=[{"role": "user", "content": "x"}],
                                       extra_body={"service_tier": "priority"})
    assert info.value.code == "unsupported_parameter" and "service_tier" in info.value.message
