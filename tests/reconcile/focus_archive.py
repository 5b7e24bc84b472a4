"""A realistic archived month for the FOCUS tests (a uniquely named module: tests dirs are not packages).

Requests spread over several days of November 2026 (and a few around its
edges), four teams with their apps and keys, three deployments from two
providers in two currencies, every token type, fallbacks (a rate-limited first
attempt with no tokens, an interrupted one with tokens, both billed by their
provider), and a price change on the 10th. Costs are rated exactly as the
gateway rates them (``pricing.rating.rate`` at the admission's price version,
FX of the attempt's month), written through ``streams.archive.write.ArchiveWriter``.
"""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

from ledger.codec import encode
from ledger.events import Event, RequestAdmitted, RequestAttempted, RequestSettled
from ledger.usage import TokenUsage
from pricing.book import FxTable, Price, PriceBook, PriceVersion
from pricing.rating import rate
from streams.archive.write import ArchiveWriter, Record

UTC = timezone.utc
NOV = datetime(2026, 11, 1, tzinfo=UTC)
DEC = datetime(2026, 12, 1, tzinfo=UTC)

DEPLOYMENTS = {  # id: (provider, account, model, region)
    "oai-mumbai": ("openai", "acct-oai-in", "gpt-4o-mini", "ap-south-1"),
    "azure-eu": ("azure", "sub-eu-7", "gpt-4o", "westeurope"),
    "claude-us": ("anthropic", "acct-anth", "claude-sonnet", "us-east-1"),
}
PROJECTS = {"oai-mumbai": "proj-retail-in", "azure-eu": "sub-eu-7-prod"}  # claude-us names no sub-account
TEAMS = {  # team: (business unit, apps)
    "payments": ("retail", ("checkout-bot", "fraud-notes")),
    "platform": ("shared", ("gateway-tests",)),
    "search": ("retail", ("query-rewrite", "summaries")),
    "legal": ("corporate", ("contract-review",)),
}

V1 = PriceVersion(1, datetime(2026, 10, 1, tzinfo=UTC), {
    "oai-mumbai": Price(input=Decimal("0.15"), cached_input=Decimal("0.075"), output=Decimal("0.60"),
                        reasoning=Decimal("0.60")),
    "azure-eu": Price(input=Decimal("2.50"), cached_input=Decimal("1.25"), output=Decimal("10.00")),
    "claude-us": Price(input=Decimal("3.00"), cached_input=Decimal("0.30"), cache_write=Decimal("3.75"),
                       output=Decimal("15.00")),
})
V2 = PriceVersion(2, datetime(2026, 11, 10, tzinfo=UTC), {
    **V1.prices,
    "azure-eu": Price(input=Decimal("2.20"), cached_input=Decimal("1.10"), output=Decimal("8.80")),
    "claude-us": Price(input=Decimal("3.00"), cached_input=Decimal("0.30"), cache_write=Decimal("3.75"),
                       output=Decimal("15.00"), currency="EUR", cache_write_1h=Decimal("6.00")),
})
BOOK = PriceBook.of([V1, V2])
FX = FxTable({("USD", "INR", "2026-10"): Decimal("83.9127"), ("USD", "INR", "2026-11"): Decimal("84.3310"),
              ("USD", "INR", "2026-12"): Decimal("84.9002"), ("EUR", "INR", "2026-11"): Decimal("90.12"),
              ("EUR", "INR", "2026-12"): Decimal("91.05")})
CURRENCY = "INR"


def _usage(rng: random.Random, deployment: str) -> TokenUsage:
    cached = rng.choice((0, 0, 256, 1024))
    usage = TokenUsage(
        input=rng.randint(20, 4000), cached_input=cached,
        cache_write=rng.choice((0, 512)) if deployment in ("claude-us", "sim-anthropic-mumbai") else 0,
        output=rng.randint(1, 900), reasoning=rng.choice((0, 0, 128)) if deployment == "oai-mumbai" else 0)
    if usage.cache_write and rng.random() < 0.5:  # written with Anthropic's one-hour lifetime, priced on its own
        usage = replace(usage, cache_write_1h=usage.cache_write // 2)
    return usage


def request(i: int, at: datetime, rng: random.Random, *, book: PriceBook = BOOK, fx: FxTable = FX,
            deployments: dict[str, tuple[str, str, str, str]] = DEPLOYMENTS, version: int | None = None) -> list[Event]:
    """Admitted, one or two attempts, settled: the events the gateway writes for request ``i``.

    ``version`` overrides the price version the events carry; one the book lacks is priced at its latest
    (events for the tests of a book that does not have their version)."""
    team = sorted(TEAMS)[i % len(TEAMS)]
    bu, apps = TEAMS[team]
    app = apps[(i // len(TEAMS)) % len(apps)]
    version = version or book.in_force(at).version
    rid = f"req-{i:05d}"
    plan = [rng.choice(sorted(deployments))]
    fallback = i % 7 == 0
    if fallback:
        plan.append(rng.choice([d for d in sorted(deployments) if d != plan[0]]))
    events: list[Event] = [RequestAdmitted(
        time=at, request_id=rid, team=team, key_id=f"fb-{team[:3]}-{i % 3}", business_unit=bu, app=app,
        run_id=None, alias="chat-default", data_class="internal", est_input_tokens=1000, max_output_tokens=1024,
        holds={f"team:{team}": 500_000}, currency=CURRENCY, price_version=version, pod="pod-a", hold_ttl_s=600,
        stream=bool(i % 2))]
    total = 0
    for n, deployment in enumerate(plan, 1):
        provider, account, model, region = deployments[deployment]
        when = at + timedelta(milliseconds=400 * n)
        failed = fallback and n == 1
        hedged = failed and i % 5 == 1  # lost a hedge race: cut, its estimated input metered
        usage = TokenUsage(input=rng.randint(10, 400), output=rng.randint(1, 40)) if failed and i % 2 else (
            TokenUsage() if failed else _usage(rng, deployment))
        if hedged:
            usage = TokenUsage(input=rng.randint(10, 400), source="estimated")
        priced = book.get(min(version, book.latest.version))
        if not failed and i % 4 == 1 and f"{deployment}@flex" in priced.prices:  # served at the flex tier
            usage = replace(usage, service_tier="flex")
        price = priced.served(deployment, usage.service_tier)
        cost = rate(usage, price, fx.rate(price.currency, CURRENCY, when)) if (
            usage.prompt_tokens or usage.completion_tokens) else 0
        total += cost
        events.append(RequestAttempted(
            time=when, request_id=rid, team=team, attempt=n, deployment=deployment, provider=provider,
            account=account, model=model, region=region,
            outcome="client_closed" if hedged else ("interrupted" if i % 2 else "rate_limited") if failed else "ok",
            status=499 if hedged else 200 if not failed else 429, ttft_ms=300, latency_ms=900, usage=usage,
            cost_micro=cost, currency=CURRENCY, price_version=version, error_code="hedge_lost" if hedged else None,
            project=PROJECTS.get(deployment)))
    events.append(RequestSettled(
        time=at + timedelta(seconds=2), request_id=rid, team=team, final_status=200, attempts=len(plan),
        deployment=plan[-1], usage=TokenUsage(), cost_micro=total, currency=CURRENCY,
        cost_by_scope={f"team:{team}": total}, hold_released={f"team:{team}": 500_000}, overrun_micro=0,
        cache_hit=False, latency_ms=2000))
    return events


def month_events(count: int = 400, seed: int = 7) -> list[Event]:
    """``count`` requests over 2026-10-30 .. 2026-12-02, with some right at the month's edges."""
    rng = random.Random(seed)
    start = datetime(2026, 10, 30, tzinfo=UTC)
    span = (datetime(2026, 12, 2, tzinfo=UTC) - start).total_seconds()
    times = sorted(start + timedelta(seconds=rng.uniform(0, span)) for _ in range(count))
    # edges: admitted before midnight, attempted after; the last microsecond of the month; its first instant
    times += [NOV - timedelta(milliseconds=300), DEC - timedelta(milliseconds=401), DEC - timedelta(seconds=5)]
    events: list[Event] = []
    for i, at in enumerate(times):
        events += request(i, at, rng)
    return events


def write_archive(root: Path, events: list[Event], *, batch: int = 97) -> Path:
    """Archive ``events`` in log order, in batches (several files per hour, as the archiver writes them)."""
    writer = ArchiveWriter(root, "log")
    stored = datetime(2026, 12, 3, tzinfo=UTC)
    ordered = sorted(events, key=lambda e: e.time)
    for first in range(0, len(ordered), batch):
        chunk = ordered[first:first + batch]
        writer.write([Record(0, first + n + 1, encode(e)) for n, e in enumerate(chunk)], now=stored)
    return root


def attempts_in(events: list[Event], start: datetime, end: datetime) -> list[RequestAttempted]:
    return [e for e in events if isinstance(e, RequestAttempted) and start <= e.time < end]


def example_config(folder, *, event_log: bool = False):
    """``examples/farebox.yaml`` rewritten into ``folder`` with its state (and, with ``event_log``, its
    event log) under ``folder/state``; returns the config path."""
    import yaml

    root = Path(__file__).resolve().parents[2]
    tree = yaml.safe_load((root / "examples" / "farebox.yaml").read_text())
    tree["secrets_file"] = str(root / "examples" / "secrets.env")
    tree["state_dir"] = str(folder / "state")
    if event_log:
        tree["event_log"]["path"] = str(folder / "state" / "events.sqlite")
    config = folder / "farebox.yaml"
    config.write_text(yaml.safe_dump(tree))
    return config


def chat_deployments(snapshot) -> dict:
    """Deployment id -> (provider, account, model, region) of every deployment a chat alias routes to."""
    return {d.id: (d.provider, d.account, d.model, d.region) for d in snapshot.deployments.values()
            if "chat" in {a.kind for a in snapshot.aliases.values() if d.id in a.deployments}}
