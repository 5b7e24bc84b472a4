"""One-hour prompt-cache writes are priced at their own rate, end to end: an Anthropic deployment with a
``cache_write_1h`` price (twice its input price, as Anthropic charges, against 1.25x for five-minute writes), a
Messages request whose system prompt is cached with ``ttl: 1h``: the provider's ``cache_creation`` split is
metered (``cache_write_1h`` in the attempt's usage), the settled cost is its usage at those prices to the
micro-rupee, the client sees the split back, the next request reads the cache, and re-rating the archived
requests at the same price version finds nothing to correct (the archive's re-rating prices the one-hour writes
as the gateway did)."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timezone
from decimal import Decimal
from typing import Iterator

import anthropic
import pytest

from ledger.request_events import RequestAttempted, RequestSettled
from ledger.usage import TokenUsage
from pricing.book import Price
from pricing.rating import rate
from tests.harness import ROOT, Stack, generous_limits, read_events, running_stack

pytestmark = pytest.mark.e2e

PRICE = Price(input=Decimal("3.00"), cached_input=Decimal("0.30"), cache_write=Decimal("3.75"),
              output=Decimal("15.00"), cache_write_1h=Decimal("6.00"))
FX = Decimal("88.00")


def _one_hour_price(tree: dict) -> None:
    generous_limits(tree)
    dep = next(d for d in tree["deployments"] if d["id"] == "sim-anthropic-mumbai")
    dep["price_per_1m"]["cache_write_1h"] = "6.00"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("one-hour"), mutate=_one_hour_price) as st:
        yield st


def test_one_hour_writes_are_metered_priced_and_rerated_the_same(stack: Stack) -> None:
    handbook = "Refunds within 30 days; exchanges within 60; always be courteous. " * 150
    system = [{"type": "text", "text": handbook, "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    seen = []
    with anthropic.Anthropic(base_url=stack.gateway_url, api_key=stack.key, max_retries=0) as claude:
        for question in ("Can I get a refund?", "Can I exchange it?"):
            raw = claude.messages.with_raw_response.create(model="chat-anthropic", max_tokens=32, system=system,
                                                           messages=[{"role": "user", "content": question}])
            seen.append((raw.parse(), raw.headers["x-fb-request-id"]))
    (first, first_id), (second, second_id) = seen
    written = first.usage.cache_creation_input_tokens
    assert written > 1024 and first.usage.cache_creation.ephemeral_1h_input_tokens == written
    assert second.usage.cache_read_input_tokens == written and second.usage.cache_creation_input_tokens == 0
    events = read_events(stack.events_path)
    for request_id in (first_id, second_id):
        attempted = next(e for e in events if isinstance(e, RequestAttempted) and e.request_id == request_id)
        settled = next(e for e in events if isinstance(e, RequestSettled) and e.request_id == request_id)
        assert settled.cost_micro == attempted.cost_micro == rate(attempted.usage, PRICE, FX)
    one_hour = next(e for e in events if isinstance(e, RequestAttempted) and e.request_id == first_id).usage
    assert one_hour.cache_write == one_hour.cache_write_1h == written
    as_five_minutes = TokenUsage(input=one_hour.input, cache_write=one_hour.cache_write, output=one_hour.output)
    premium = rate(one_hour, PRICE, FX) - rate(as_five_minutes, PRICE, FX)  # micro-rupees, each rounded up once
    assert abs(premium - written * (Decimal("6.00") - Decimal("3.75")) * FX) <= 1

    def farebox(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "farebox", *args, "--config", str(stack.config)], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)

    flushed = farebox("archive", "flush")
    assert flushed.returncode == 0, flushed.stderr
    today = datetime.now(timezone.utc).date().isoformat()
    report = farebox("rerate", "--from", today, "--to", today, "--price-version", "1", "--format", "json")
    assert report.returncode == 0, report.stderr
    [line] = json.loads(report.stdout)  # the two requests, re-rated from the archive at the version they ran at
    assert (line["requests"], line["diff_micro"]) == (2, 0) and line["old_micro"] == line["new_micro"], line
