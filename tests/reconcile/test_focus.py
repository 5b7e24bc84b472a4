"""FOCUS export: grain, per-token-type pricing, reconciliation with the ledger, windows, determinism, bad input."""

from __future__ import annotations

import csv
import random
import shutil
import tempfile
from collections import Counter, defaultdict
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.codec import encode
from ledger.events import RequestAttempted
from ledger.usage import TOKEN_TYPES, TokenUsage
from pricing.book import FxTable, Price, PriceBook, PriceVersion
from pricing.rating import exact_cost, rate
from reconcile.focus.columns import (
    ACCOUNT_TYPES,
    COLUMNS,
    FOCUS_COLUMNS,
    FOCUS_TYPES,
    HEDGE_LOST,
    SKU_METERS,
    X_COLUMNS,
)
from reconcile.focus.export import FocusError, export_focus
from streams.archive.schema import SCHEMA, SCHEMA_METADATA_KEY, typed_row
from streams.archive.write import ArchiveWriter, Record
from tests.reconcile.focus_archive import (
    BOOK,
    CURRENCY,
    DEC,
    DEPLOYMENTS,
    FX,
    NOV,
    PROJECTS,
    UTC,
    V1,
    attempts_in,
    month_events,
    request,
    write_archive,
)
from tests.streams.relist import relist

MICRO = Decimal("0.000001")
METER_TYPE = {meter: kind for kind, meter in SKU_METERS.items()}


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def month(tmp_path_factory):
    """The archived test month and its November export (CSV)."""
    folder = tmp_path_factory.mktemp("focus")
    events = month_events()
    root = write_archive(folder / "archive", events)
    summary = export_focus(root, "2026-11", BOOK, FX, folder / "nov.csv", currency=CURRENCY)
    return events, root, summary, read_csv(folder / "nov.csv")


def test_columns_focus_first_then_x_columns(month):
    _, _, summary, rows = month
    assert list(rows[0]) == list(COLUMNS)
    assert COLUMNS.index("x_team") > max(COLUMNS.index(c) for c in FOCUS_COLUMNS)
    assert set(X_COLUMNS) >= {"x_team", "x_app", "x_business_unit", "x_cost_centre", "x_alias", "x_key_id",
                              "x_requests"}
    assert summary.rows == len(rows) == summary.usage_rows


def test_one_row_per_day_deployment_token_type_and_owner_with_tokens_as_quantities(month):
    events, _, _, rows = month
    keys = Counter((r["ChargePeriodStart"], r["ResourceId"], r["SkuMeter"], r["x_price_version"], r["x_team"],
                    r["x_app"], r["x_key_id"], r["x_alias"], r["Tags"]) for r in rows)
    assert max(keys.values()) == 1
    for r in rows:
        assert r["ConsumedUnit"] == "Tokens" and r["PricingUnit"] == "1000000 Tokens"
        assert r["ChargeCategory"] == "Usage" and r["ChargeClass"] == "" and r["ChargeFrequency"] == "Usage-Based"
        assert r["ServiceCategory"] == "AI and Machine Learning" and r["ServiceSubcategory"] == "Generative AI"
        assert Decimal(r["PricingQuantity"]) * 1_000_000 == Decimal(r["ConsumedQuantity"]) > 0
        kind = METER_TYPE[r["SkuMeter"]]
        assert r["x_token_type"] == kind and r["SkuId"].endswith(f":{kind}")
        start = datetime.fromisoformat(r["ChargePeriodStart"])
        assert datetime.fromisoformat(r["ChargePeriodEnd"]) - start == timedelta(days=1)
        assert (r["BillingPeriodStart"], r["BillingPeriodEnd"]) == ("2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z")
        assert r["ProviderName"] == r["PublisherName"] == r["InvoiceIssuerName"]
        assert r["x_app"] and r["x_business_unit"] and r["InvoiceId"] == ""
        _, account, _, _ = DEPLOYMENTS[r["ResourceId"]]
        assert r["BillingAccountId"] == r["BillingAccountName"] == account
        project = PROJECTS.get(r["ResourceId"], "")
        assert r["SubAccountId"] == r["SubAccountName"] == project
        assert r["BillingAccountType"] == ACCOUNT_TYPES[r["ProviderName"]][0]
        assert r["SubAccountType"] == (ACCOUNT_TYPES[r["ProviderName"]][1] if project else "")
    tokens: dict[str, int] = defaultdict(int)
    for a in attempts_in(events, NOV, DEC):
        for kind in TOKEN_TYPES:
            tokens[kind] += getattr(a.usage, kind)
        tokens["cache_write"] -= a.usage.cache_write_1h  # the one-hour writes are their own line
        tokens["cache_write_1h"] += a.usage.cache_write_1h
    exported: dict[str, Decimal] = defaultdict(Decimal)
    for r in rows:
        exported[METER_TYPE[r["SkuMeter"]]] += Decimal(r["ConsumedQuantity"])
    assert {k: int(v) for k, v in exported.items()} == {k: v for k, v in tokens.items() if v}
    assert set(exported) == set(FOCUS_TYPES)  # every token type is in the month


def test_sku_price_id_is_stable_across_price_versions(month):
    _, _, _, rows = month
    azure_input = {(r["x_price_version"], r["SkuPriceId"], r["ListUnitPrice"]) for r in rows
                   if r["ResourceId"] == "azure-eu" and r["SkuMeter"] == "Input Tokens"}
    assert {v for v, _, _ in azure_input} == {"1", "2"}
    assert len({s for _, s, _ in azure_input}) == 1 and len({p for _, _, p in azure_input}) == 2


def test_billed_cost_equals_the_ledger_and_each_row_is_priced_from_its_own_token_type(month):
    events, _, summary, rows = month
    nov = attempts_in(events, NOV, DEC)
    ledger = sum(a.cost_micro for a in nov)
    billed = sum(Decimal(r["BilledCost"]) for r in rows)
    assert billed == Decimal(ledger) * MICRO and summary.billed_micro == summary.ledger_micro == ledger
    exact = sum(exact_cost(a.usage, BOOK.get(a.price_version).price(a.deployment),
                           FX.rate(BOOK.get(a.price_version).price(a.deployment).currency, CURRENCY, a.time))
                for a in nov)
    assert summary.exact_micro == exact * 1_000_000
    assert 0 <= summary.rounding_micro < summary.attempts == len(nov)
    list_total = sum(Decimal(r["ListCost"]) for r in rows)
    assert billed - list_total == summary.rounding_micro * MICRO
    for r in rows:
        kind, version = METER_TYPE[r["SkuMeter"]], int(r["x_price_version"])
        price = BOOK.get(version).price(r["ResourceId"])
        unit = price.per_million(kind) * FX.rate(price.currency, CURRENCY, NOV)
        assert Decimal(r["ListUnitPrice"]) == Decimal(r["ContractedUnitPrice"]) == unit
        assert Decimal(r["PricingCurrencyListUnitPrice"]) == price.per_million(kind)
        assert Decimal(r["ListCost"]) == Decimal(r["ContractedCost"]) == unit * Decimal(r["PricingQuantity"])
        assert abs(Decimal(r["BilledCost"]) - Decimal(r["ListCost"])) < int(r["x_attempts"]) * MICRO
        assert r["EffectiveCost"] == r["BilledCost"]


def test_the_lost_legs_of_hedged_requests_are_their_own_charge(month):
    """Attempts that lost a hedge race are rows of their own, described so, billed exactly what the ledger charged
    them; no other row says so."""
    events, _, _, rows = month
    lost = [a for a in attempts_in(events, NOV, DEC) if a.error_code == "hedge_lost"]
    assert lost and all(a.cost_micro > 0 for a in lost)
    hedge_rows = [r for r in rows if r["ChargeDescription"].endswith(HEDGE_LOST)]
    assert sum(Decimal(r["BilledCost"]) for r in hedge_rows) == sum(a.cost_micro for a in lost) * MICRO
    assert sum(int(r["x_attempts"]) for r in hedge_rows if r["x_token_type"] == "input") == len(lost)
    assert {r["x_token_type"] for r in hedge_rows} == {"input"}  # an estimate of the input sent, nothing else


@settings(max_examples=20, deadline=None)
@given(usages=st.lists(st.tuples(*[st.integers(0, 50_000)] * 5), min_size=1, max_size=6),
       prices=st.tuples(*[st.decimals("0", "40", places=4)] * 5), fx=st.decimals("0.001", "120", places=6))
def test_allocation_each_attempt_adds_up_to_its_rated_cost(usages, prices, fx):
    """Each attempt its own rows (one team per attempt): per attempt, the rows add up to ``pricing.rating.rate``
    exactly and each type is within one micro-unit of its own exact cost; types with no tokens get nothing."""
    price = Price(*prices[:2], cached_input=prices[2], cache_write=prices[3], reasoning=prices[4])
    book = PriceBook.of([PriceVersion(1, datetime(2026, 1, 1, tzinfo=UTC), {"d": price})])
    table = FxTable({("USD", "INR", "2026-11"): fx})
    events = []
    for n, counts in enumerate(usages):
        usage = TokenUsage(**dict(zip(TOKEN_TYPES, counts)))
        cost = rate(usage, price, fx) if (usage.prompt_tokens or usage.completion_tokens) else 0
        events.append(RequestAttempted(
            time=NOV + timedelta(hours=n), request_id=f"r{n}", team=f"t{n}", attempt=1, deployment="d",
            provider="p", account="a", model="m", region="r", outcome="ok", status=200, ttft_ms=1, latency_ms=1,
            usage=usage, cost_micro=cost, currency="INR", price_version=1, error_code=None))
    with tempfile.TemporaryDirectory() as tmp:
        root = write_archive(Path(tmp) / "archive", events)
        if not any(sum(u) for u in usages):
            with pytest.raises(FocusError, match="no usage"):
                export_focus(root, "2026-11", book, table, Path(tmp) / "out.csv")
            return
        export_focus(root, "2026-11", book, table, Path(tmp) / "out.csv")
        rows = read_csv(Path(tmp) / "out.csv")
    for event in events:
        mine = {METER_TYPE[r["SkuMeter"]]: Decimal(r["BilledCost"]) for r in rows if r["x_team"] == event.team}
        assert sum(mine.values(), Decimal(0)) == Decimal(event.cost_micro) * MICRO
        for kind in TOKEN_TYPES:
            tokens = getattr(event.usage, kind)
            assert (kind in mine) == (tokens > 0)
            if tokens:
                own = Decimal(tokens) * price.per_million(kind) * fx / 1_000_000
                assert abs(mine[kind] - own) < MICRO


def test_months_never_overlap_and_edges_land_once(month, tmp_path):
    events, root, _, nov_rows = month
    totals = {}
    for name in ("2026-10", "2026-11", "2026-12"):
        summary = export_focus(root, name, BOOK, FX, tmp_path / f"{name}.csv", currency=CURRENCY)
        totals[name] = summary.ledger_micro
        assert sum(Decimal(r["BilledCost"]) for r in read_csv(tmp_path / f"{name}.csv")) == summary.ledger_micro * MICRO
    assert sum(totals.values()) == sum(e.cost_micro for e in events if isinstance(e, RequestAttempted))
    assert totals["2026-12"] == sum(a.cost_micro for a in attempts_in(events, DEC, DEC + timedelta(days=31)))
    days = {r["ChargePeriodStart"] for r in nov_rows}
    assert min(days) == "2026-11-01T00:00:00Z" and max(days) == "2026-11-30T00:00:00Z"
    # the request admitted in October keeps its dimensions on its November attempt
    first = [r for r in nov_rows if r["ChargePeriodStart"] == "2026-11-01T00:00:00Z"]
    assert first and all(r["x_app"] and r["x_key_id"] and r["x_alias"] == "chat-default" for r in first)


def test_same_month_twice_gives_the_same_bytes_even_with_duplicate_files(month, tmp_path):
    _, root, _, _ = month
    copy = tmp_path / "archive"
    shutil.copytree(root, copy)
    part = sorted(copy.glob("date=2026-11-1*/hour=*/part-*.parquet"))[0]
    shutil.copy(part, part.with_name("part-0-99999999999999999990-99999999999999999999.parquet"))  # a copy by hand
    for suffix in ("csv", "parquet"):
        a = export_focus(root, "2026-11", BOOK, FX, tmp_path / f"a.{suffix}").path.read_bytes()
        b = export_focus(root, "2026-11", BOOK, FX, tmp_path / f"b.{suffix}").path.read_bytes()
        c = export_focus(copy, "2026-11", BOOK, FX, tmp_path / f"c.{suffix}").path.read_bytes()
        assert a == b == c


def test_parquet_holds_the_csv_values_exactly(month, tmp_path):
    _, root, _, rows = month
    export_focus(root, "2026-11", BOOK, FX, tmp_path / "nov.parquet")
    table = pq.read_table(tmp_path / "nov.parquet")
    assert table.schema.names == list(COLUMNS)
    assert str(table.schema.field("BilledCost").type) == "decimal128(38, 6)"
    assert str(table.schema.field("ChargePeriodStart").type) == "timestamp[ms, tz=UTC]"
    for row, parquet in zip(rows, table.to_pylist(), strict=True):
        for column in ("BilledCost", "ListCost", "ListUnitPrice", "PricingQuantity", "ConsumedQuantity"):
            assert Decimal(row[column]) == parquet[column]
        assert parquet["ChargePeriodStart"].strftime("%Y-%m-%dT%H:%M:%SZ") == row["ChargePeriodStart"]
        assert (row["x_team"], row["Tags"], int(row["x_requests"])) == (parquet["x_team"], parquet["Tags"],
                                                                        parquet["x_requests"])


# --- bad input: a clear FocusError, nothing written ---------------------------------------


@pytest.mark.parametrize("bad", ["2026-13", "2026-1", "26-11", "2026/11", "november", "2026-11-01", ""])
def test_unknown_month_format(month, tmp_path, bad):
    with pytest.raises(FocusError, match="YYYY-MM"):
        export_focus(month[1], bad, BOOK, FX, tmp_path / "x.csv")
    assert not (tmp_path / "x.csv").exists()


def test_month_without_data_and_missing_archive(month, tmp_path):
    with pytest.raises(FocusError, match="no usage to export for 2025-03"):
        export_focus(month[1], "2025-03", BOOK, FX, tmp_path / "x.csv")
    with pytest.raises(FocusError, match="no archive at"):
        export_focus(tmp_path / "nowhere", "2026-11", BOOK, FX, tmp_path / "x.csv")
    with pytest.raises(FocusError, match=r"\.csv or \.parquet"):
        export_focus(month[1], "2026-11", BOOK, FX, tmp_path / "x.json")
    assert not list(tmp_path.iterdir())


def test_missing_price_version_fx_or_deployment_is_named(month, tmp_path):
    root = month[1]
    with pytest.raises(FocusError, match="price version 2"):
        export_focus(root, "2026-11", PriceBook.of([V1]), FX, tmp_path / "x.csv")
    with pytest.raises(FocusError, match="USD->INR for 2026-11"):
        export_focus(root, "2026-11", BOOK, FxTable({("EUR", "INR", "2026-11"): Decimal(90)}), tmp_path / "x.csv")
    cut = PriceBook.of([PriceVersion(1, V1.valid_from, {k: v for k, v in V1.prices.items() if k != "azure-eu"})])
    with pytest.raises(FocusError, match="'azure-eu'"):
        export_focus(root, "2026-11", cut, FX, tmp_path / "x.csv")
    assert not (tmp_path / "x.csv").exists()


def test_unknown_price_version_in_events(tmp_path):
    rng = random.Random(3)
    root = write_archive(tmp_path / "archive", request(1, NOV + timedelta(days=2), rng, version=9))
    with pytest.raises(FocusError, match="price version 9"):
        export_focus(root, "2026-11", BOOK, FX, tmp_path / "x.csv")


def test_a_book_that_disagrees_with_the_ledger_is_refused(month, tmp_path):
    changed = {k: Price(input=v.input + Decimal("0.01"), output=v.output, cached_input=v.cached_input,
                        cache_write=v.cache_write, reasoning=v.reasoning, currency=v.currency)
               for k, v in V1.prices.items()}
    book = PriceBook.of([PriceVersion(1, V1.valid_from, changed), *BOOK.versions[1:]])
    with pytest.raises(FocusError, match=r"attempt\(s\) were charged an amount the price book does not give.*req-"):
        export_focus(month[1], "2026-11", book, FX, tmp_path / "x.csv")


def test_unreadable_or_newer_archive_files_are_named(month, tmp_path):
    copy = tmp_path / "archive"
    shutil.copytree(month[1], copy)
    files = sorted(copy.glob("date=2026-11-0*/hour=*/part-*.parquet"))
    table = pq.read_table(files[0])
    pq.write_table(table.replace_schema_metadata({SCHEMA_METADATA_KEY: b"99"}), files[0])
    relist(copy, files[0])  # as a newer farebox would list it (a file rewritten in place is never read)
    with pytest.raises(FocusError, match=f"{files[0].name}: archive schema 99 is newer"):
        export_focus(copy, "2026-11", BOOK, FX, tmp_path / "x.csv")
    files[0].write_bytes(files[0].read_bytes()[:100])
    relist(copy, files[0])
    with pytest.raises(FocusError, match=f"{files[0].name}: not a readable archive file"):
        export_focus(copy, "2026-11", BOOK, FX, tmp_path / "x.csv")


def test_cost_centre_and_tags_on_the_admission_reach_tags_and_x_cost_centre(tmp_path):
    """Rows whose admission carries a cost centre and caller tags (written straight into the archive's typed
    columns, as the archiver does once events carry them) group by them and show them."""
    rng = random.Random(11)
    rows = []
    for i, tags in enumerate(({"project": "q4", "env": "prod"}, {"env": "prod", "project": "q4"}, {"env": "dev"})):
        for offset, event in enumerate(request(i, NOV + timedelta(days=2, minutes=i), rng), start=10 * i):
            wire = orjson.loads(encode(event))
            row = typed_row(wire, stored_at=NOV, partition=0, offset=offset, text=encode(event).decode())
            if event.type == "request.admitted":
                row.update(cost_centre="cc-7", tags=sorted(tags.items()))
            rows.append(row)
    folder = tmp_path / "archive" / "date=2026-11-03" / "hour=00"
    folder.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), folder / "part-0-1-30.parquet")
    relist(tmp_path / "archive", folder / "part-0-1-30.parquet")
    export_focus(tmp_path / "archive", "2026-11", BOOK, FX, tmp_path / "out.csv")
    out = read_csv(tmp_path / "out.csv")
    assert {r["x_cost_centre"] for r in out} == {"cc-7"}
    assert {r["Tags"] for r in out} == {'{"env":"prod","project":"q4"}', '{"env":"dev"}'}


def test_late_arrivals_for_an_exported_day_count_once(tmp_path):
    """A day exported, then more of its events archived (new files in the same hour folders, overlapping
    the first batch): the re-export rebuilds the day from its events, so each attempt counts once."""
    rng = random.Random(23)
    events = []
    for i in range(40):
        events += request(i, NOV + timedelta(days=4, minutes=20 * i), rng)
    root = write_archive(tmp_path / "archive", events[:60], batch=25)
    first = export_focus(root, "2026-11", BOOK, FX, tmp_path / "first.csv")
    ArchiveWriter(root, "late").write([Record(1, n, encode(e)) for n, e in enumerate(events[40:])])
    again = export_focus(root, "2026-11", BOOK, FX, tmp_path / "again.csv")
    everything = sum(e.cost_micro for e in events if isinstance(e, RequestAttempted))
    assert first.ledger_micro < again.ledger_micro == again.billed_micro == everything
    billed = sum(Decimal(r["BilledCost"]) for r in read_csv(tmp_path / "again.csv"))
    assert billed == Decimal(everything) * MICRO
