"""The providers' batch results as input (``proxy.upstream.batch_api``): OpenAI's output/error file lines and
Anthropic's results lines read into one ``LineResult`` per line that ran, lines never run left out, and anything
not the documented shape refused by name (never a traceback, never a line billed twice). And a provider batch's
metering (``proxy.batches.provider_money``): usage that fails the boundary is billed farebox's estimate, always
at the batch tier."""

from __future__ import annotations

import orjson
import pytest

from ledger.usage import TokenUsage
from proxy.batches.provider_money import line_usage
from proxy.upstream.batch_api import BatchAPIError, parse_anthropic_results, parse_openai_results
from proxy.upstream.usage_check import invalid


def _jsonl(*rows: object) -> bytes:
    return b"\n".join(orjson.dumps(r) for r in rows) + b"\n"


def test_openai_lines_map_back_to_their_line_numbers_and_unrun_lines_are_left_out() -> None:
    raw = _jsonl({"id": "r1", "custom_id": "2", "response": {"status_code": 200, "body": {"choices": []}}, "error": None},
                 {"id": "r2", "custom_id": "1", "response": {"status_code": 400, "body": {"error": {}}}, "error": None},
                 {"id": "r3", "custom_id": "3", "response": None, "error": {"code": "batch_expired"}})
    got = parse_openai_results(raw, {1, 2, 3})
    assert [(r.number, r.ok, r.status) for r in got] == [(2, True, 200), (1, False, 400)]


def test_anthropic_results_read_succeeded_and_errored_and_skip_canceled_and_expired() -> None:
    raw = _jsonl({"custom_id": "1", "result": {"type": "succeeded", "message": {"id": "m"}}},
                 {"custom_id": "2", "result": {"type": "errored", "error": {"type": "error"}}},
                 {"custom_id": "3", "result": {"type": "canceled"}}, {"custom_id": "4", "result": {"type": "expired"}})
    got = parse_anthropic_results(raw, {1, 2, 3, 4})
    assert [(r.number, r.ok) for r in got] == [(1, True), (2, False)]


@pytest.mark.parametrize("raw,says", [
    (b"not json\n", "not JSON"),
    (b"[1]\n", "not a JSON object"),
    (_jsonl({"custom_id": "9", "result": {"type": "succeeded", "message": {}}}), "does not have"),
    (_jsonl({"custom_id": "x1", "result": {"type": "succeeded", "message": {}}}), "does not have"),
    (_jsonl({"custom_id": "1", "result": {"type": "succeeded", "message": {}}},
            {"custom_id": "1", "result": {"type": "succeeded", "message": {}}}), "twice"),
    (_jsonl({"custom_id": "1", "result": {"type": "surprise"}}), "unknown type"),
])
def test_anthropic_results_that_are_not_the_documented_shape_are_refused_by_name(raw: bytes, says: str) -> None:
    with pytest.raises(BatchAPIError) as refused:
        parse_anthropic_results(raw, {1, 2})
    assert says in str(refused.value)


def test_an_openai_result_without_a_status_code_is_refused() -> None:
    with pytest.raises(BatchAPIError, match="status_code"):
        parse_openai_results(_jsonl({"custom_id": "1", "response": {"status_code": "200", "body": {}}}), {1})


def test_a_lines_usage_is_the_providers_within_its_bound_at_the_batch_tier() -> None:
    usage = line_usage(TokenUsage(input=40, output=12), (50, 100), {}, 1000)
    assert (usage.input, usage.output, usage.source, usage.service_tier) == (40, 12, "provider", "batch")


@pytest.mark.parametrize("reported", [None, invalid({"prompt_tokens": -1}), TokenUsage(input=10**9, output=1)])
def test_usage_missing_invalid_or_past_the_bound_is_billed_farebox_estimate(reported) -> None:
    answer = {"choices": [{"message": {"content": "x" * 400}}]}
    usage = line_usage(reported, (50, 100), answer, 128_000 + 100)
    assert usage.input == 50 and 0 < usage.output <= 100 and usage.service_tier == "batch"
    assert usage.source in ("estimated", "provider_invalid")
