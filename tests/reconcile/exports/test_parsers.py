"""The three export shapes parsed from fixture files written from the documented shapes, and their traps."""

from __future__ import annotations

import json
from datetime import date
from decimal import Decimal
from pathlib import Path

import pytest

from reconcile.exports import (
    ExportParseError,
    UsageRow,
    parse_anthropic_costs,
    parse_anthropic_usage,
    parse_openai_costs,
    parse_openai_usage,
    parse_simulator_csv,
    parse_simulator_export,
)

FIXTURES = Path(__file__).parent / "fixtures"
NOV30, DEC1 = date(2026, 11, 30), date(2026, 12, 1)


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def by_type(rows: list[UsageRow], day: date, model: str) -> dict[str, int]:
    return {r.token_type: r.tokens for r in rows if r.day == day and r.model == model}


# --- the simulator -------------------------------------------------------------------------------------------


def test_simulator_json_maps_its_five_types_one_to_one():
    rows = parse_simulator_export(fixture("simulator_export.json"), provider="openai")
    assert by_type(rows, NOV30, "gpt-sim") == {"input": 15, "cached_input": 9, "cache_write": 0, "output": 96,
                                               "reasoning": 12}
    assert by_type(rows, NOV30, "claude-sim")["cache_write"] == 2
    assert {r.requests for r in rows if r.model == "gpt-sim"} == {3}
    assert {(r.provider, r.account) for r in rows} == {("openai", "acme")}
    assert all(r.priced for r in rows)


def test_simulator_csv_keeps_an_unknown_column_as_an_unpriced_type():
    rows = parse_simulator_csv(fixture("simulator_export.csv"))
    acme = {r.token_type: r for r in rows if r.account == "acme"}
    assert acme["input_audio"].tokens == 30 and not acme["input_audio"].priced
    assert acme["reasoning"].tokens == 12 and acme["input"].requests == 3
    # a zero count of a type farebox does not price is not a row
    assert "input_audio" not in {r.token_type for r in rows if r.account == "globex"}


def test_simulator_errors_name_the_field_or_line():
    bad = json.loads(fixture("simulator_export.json"))
    bad["data"][1]["output"] = "96"
    with pytest.raises(ExportParseError) as err:
        parse_simulator_export(bad)
    assert err.value.where == "data[1].output"
    with pytest.raises(ExportParseError, match=r"^data\[0\]\.date: must be a date"):
        parse_simulator_export({"object": "usage_export", "data": [{"account": "a", "date": "30/11/2026",
                                                                     "model": "m", "requests": 1}]})
    csv_text = fixture("simulator_export.csv").decode().replace(",32,", ",3x,")
    with pytest.raises(ExportParseError, match=r"^line 3\.output: must be a non-negative integer"):
        parse_simulator_csv(csv_text)
    with pytest.raises(ExportParseError, match=r"^line 1: header lacks requests"):
        parse_simulator_csv("account,date,model\n")
    with pytest.raises(ExportParseError, match=r"^<export>: not valid JSON"):
        parse_simulator_export(b"{not json")


# --- OpenAI ----------------------------------------------------------------------------------------------------


def test_openai_input_tokens_include_the_cached_ones():
    rows = parse_openai_usage([fixture("openai_usage_page1.json"), fixture("openai_usage_page2.json")], "oa-main")
    mini = by_type(rows, NOV30, "gpt-4o-mini-2024-07-18")
    # (1000 - 800) + (300 - 0) uncached; projects and keys of one model fold into one row per type
    assert mini == {"input": 500, "cached_input": 800, "output": 600, "input_audio_tokens": 40}
    assert by_type(rows, NOV30, "gpt-4o-2024-08-06") == {"input": 1500, "cached_input": 500, "output": 700}
    assert {r.requests for r in rows if r.day == NOV30 and r.model.startswith("gpt-4o-mini")} == {7}
    assert not next(r for r in rows if r.token_type == "input_audio_tokens").priced
    assert {(r.provider, r.account) for r in rows} == {("openai", "oa-main")}


def test_openai_pagination_reads_every_page_and_refuses_a_missing_one():
    rows = parse_openai_usage([fixture("openai_usage_page1.json"), fixture("openai_usage_page2.json")], "a")
    assert by_type(rows, DEC1, "gpt-4o-mini-2024-07-18") == {"input": 40, "cached_input": 10, "output": 20}
    with pytest.raises(ExportParseError, match=r"pages\[0\]\.has_more: is true on the last page"):
        parse_openai_usage([fixture("openai_usage_page1.json")], "a")
    with pytest.raises(ExportParseError, match=r"pages\[0\]\.has_more: is false but more pages follow"):
        parse_openai_usage([fixture("openai_usage_page2.json"), fixture("openai_usage_page1.json")], "a")


def test_openai_cached_above_input_is_refused():
    page = json.loads(fixture("openai_usage_page2.json"))
    page["data"][0]["results"][0]["input_cached_tokens"] = 51
    with pytest.raises(ExportParseError, match=r"data\[0\]\.results\[0\]\.input_cached_tokens: 51 exceeds"):
        parse_openai_usage(page, "a")


def _bucket(start: int, end: int, output: object = 1) -> dict:
    return {"object": "bucket", "start_time": start, "end_time": end, "results": [
        {"object": "organization.usage.completions.result", "input_tokens": 1, "output_tokens": output,
         "num_model_requests": 1, "model": "m"}]}


def test_error_names_the_bucket_result_and_field():
    day = 1795996800
    buckets = [_bucket(day + h * 3600, day + (h + 1) * 3600) for h in range(3)]
    buckets.append(_bucket(day + 3 * 3600, day + 4 * 3600, output="12"))
    with pytest.raises(ExportParseError) as err:
        parse_openai_usage({"object": "page", "data": buckets, "has_more": False}, "a")
    assert err.value.where == "data[3].results[0].output_tokens"
    assert str(err.value) == "data[3].results[0].output_tokens: must be a non-negative integer, got '12'"


def test_buckets_are_half_open_in_utc():
    midnight = 1796083200  # 2026-12-01T00:00Z
    last_hour = _bucket(midnight - 3600, midnight)
    rows = parse_openai_usage({"object": "page", "data": [last_hour], "has_more": False}, "a")
    assert {r.day for r in rows} == {NOV30}  # ends at midnight: the earlier day
    first_hour = _bucket(midnight, midnight + 3600)
    rows = parse_openai_usage({"object": "page", "data": [first_hour], "has_more": False}, "a")
    assert {r.day for r in rows} == {DEC1}


def test_a_bucket_spanning_two_days_is_an_error_not_a_guess():
    noon = 1796083200 - 12 * 3600
    with pytest.raises(ExportParseError, match=r"^data\[0\]: bucket .* spans two UTC days"):
        parse_openai_usage({"object": "page", "data": [_bucket(noon, noon + 86400)], "has_more": False}, "a")
    with pytest.raises(ExportParseError, match=r"^data\[0\]: bucket ends .* at or before it starts"):
        parse_openai_usage({"object": "page", "data": [_bucket(noon, noon)], "has_more": False}, "a")


def test_openai_costs_are_exact_decimals_with_model_and_type_from_the_line_item():
    costs = parse_openai_costs(fixture("openai_costs.json"), "oa-main")
    by_key = {(c.model, c.token_type): c for c in costs}
    assert by_key[("gpt-4o-mini-2024-07-18", "input")].amount == Decimal("0.3")  # 0.1 + 0.2, never 0.30000000000000004
    assert by_key[("gpt-4o-mini-2024-07-18", "cached_input")].amount == Decimal("0.00006")
    assert by_key[("gpt-4o-mini-2024-07-18", "output")].amount == Decimal("0.00036")
    image = by_key[(None, "Image models")]
    assert image.amount == Decimal("1.5") and image.description == "Image models"
    assert {c.currency for c in costs} == {"USD"} and {c.day for c in costs} == {NOV30}
    assert all(isinstance(c.amount, Decimal) for c in costs)


def test_openai_cost_amount_given_as_a_float_is_refused():
    page = {"object": "page", "has_more": False, "data": [{"object": "bucket", "start_time": 1795996800,
            "end_time": 1796083200, "results": [{"object": "organization.costs.result",
                                                 "amount": {"value": 0.1, "currency": "usd"}}]}]}
    with pytest.raises(ExportParseError, match=r"amount\.value: must be a decimal string or number read exactly"):
        parse_openai_costs(page, "a")  # parsed by a float-producing JSON reader: refused, not rounded


# --- Anthropic -------------------------------------------------------------------------------------------------


def test_anthropic_uncached_input_excludes_cache_reads_and_writes_and_lifetimes_sum():
    rows = parse_anthropic_usage([fixture("anthropic_usage_page1.json"), fixture("anthropic_usage_page2.json")],
                                 "an-main")
    assert by_type(rows, NOV30, "claude-sonnet-4-20250514") == {
        "input": 1300,  # 1200 + 100, as reported: no subtraction
        "cached_input": 3000,
        "cache_write": 1050,  # 400 (5m) + 600 (1h) + 50 (1h)
        "output": 910,
        "web_search_requests": 2,  # a billed unit farebox does not price, kept by its name
    }
    assert {r.requests for r in rows} == {None}  # the report gives no request counts
    assert {(r.provider, r.account) for r in rows} == {("anthropic", "an-main")}


def test_anthropic_errors_name_the_path():
    page = json.loads(fixture("anthropic_usage_page2.json"))
    page["data"][0]["results"][0]["cache_creation"]["ephemeral_1h_input_tokens"] = -5
    with pytest.raises(ExportParseError) as err:
        parse_anthropic_usage(page, "a")
    assert err.value.where == "data[0].results[0].cache_creation.ephemeral_1h_input_tokens"
    with pytest.raises(ExportParseError) as err:
        parse_anthropic_usage([fixture("anthropic_usage_page1.json"), page], "a")
    assert err.value.where == "pages[1].data[0].results[0].cache_creation.ephemeral_1h_input_tokens"
    page = json.loads(fixture("anthropic_usage_page2.json"))
    page["data"][0]["ending_at"] = "tomorrow"
    with pytest.raises(ExportParseError, match=r"^data\[0\]\.ending_at: must be an RFC 3339 time"):
        parse_anthropic_usage(page, "a")


def test_anthropic_costs_are_in_cents_and_become_currency_units():
    costs = parse_anthropic_costs(fixture("anthropic_costs.json"), "an-main")
    model = "claude-sonnet-4-20250514"
    assert [c.amount for c in costs if c.model == model and c.token_type == "input"] == [Decimal("1.2345")]
    writes = sorted(c.amount for c in costs if c.token_type == "cache_write")
    assert writes == [Decimal("0.105"), Decimal("0.20")]  # both lifetimes are cache_write
    search = next(c for c in costs if c.token_type == "web_search")
    assert search.model is None and search.amount == Decimal("10.00") and search.currency == "USD"


def test_anthropic_cost_with_an_unknown_currency_is_refused():
    page = json.loads(fixture("anthropic_costs.json"))
    page["data"][0]["results"][2]["currency"] = "XTS"
    with pytest.raises(ExportParseError, match=r"^data\[0\]\.results\[2\]\.currency: unknown currency 'XTS'"):
        parse_anthropic_costs(page, "a")


def _kind_page(kind: str, results: list[dict]) -> dict:
    start = 1763596800  # 2025-11-20T00:00:00Z
    return {"object": "page", "has_more": False, "next_page": None, "data": [
        {"object": "bucket", "start_time": start, "end_time": start + 86400,
         "results": [{"object": f"organization.usage.{kind}.result", **r} for r in results]}]}


def test_openai_every_usage_endpoint_parses_to_its_units():
    """Embeddings and moderations count input tokens; images, speech and transcription their own billed units."""
    day = date(2025, 11, 20)
    embed = parse_openai_usage(_kind_page("embeddings", [
        {"input_tokens": 1200, "num_model_requests": 3, "model": "text-embedding-3-small", "project_id": None}]),
        "org", "embeddings")
    assert [(r.day, r.model, r.token_type, r.tokens, r.requests) for r in embed] == [
        (day, "text-embedding-3-small", "input", 1200, 3)]
    images = parse_openai_usage(_kind_page("images", [
        {"images": 2, "num_model_requests": 1, "model": "gpt-image-1", "size": "1024x1024", "source": "image.edit"},
        {"images": 3, "num_model_requests": 2, "model": "gpt-image-1", "size": "512x512", "source": "image.generation"},
    ]), "org", "images")
    assert [(r.token_type, r.tokens, r.requests) for r in images] == [("images", 5, 3)]
    speech = parse_openai_usage(_kind_page("audio_speeches", [
        {"characters": 4500, "num_model_requests": 2, "model": "tts-1"}]), "org", "audio_speeches")
    assert [(r.token_type, r.tokens) for r in speech] == [("characters", 4500)]
    with pytest.raises(ExportParseError, match="organization.usage.embeddings.result"):
        parse_openai_usage(_kind_page("moderations", [{"input_tokens": 1, "num_model_requests": 1}]), "org",
                           "embeddings")
    with pytest.raises(ExportParseError, match="unknown OpenAI usage endpoint 'vector_stores'"):
        parse_openai_usage(_kind_page("vector_stores", []), "org", "vector_stores")
