"""A batch's input read as requests (``proxy.batches.lines``), and what a line's answer means for it
(``proxy.batches.runner.outcome``), and what a synthetic-canary probe's answer says of its deployment
(``proxy.batches.canary.status_of``)."""

from __future__ import annotations

import orjson
import pytest

from proxy.batches.lines import MAX_PROBLEMS, read_lines
from proxy.batches.runner import outcome, retry_after_s

EP = "/v1/chat/completions"


def _line(i: int, **over) -> bytes:
    obj = {"custom_id": f"c{i}", "method": "POST", "url": EP, "body": {"model": "chat-default", "messages": []}}
    obj.update(over)
    return orjson.dumps(obj)


def test_good_lines_are_read_in_order_with_their_bodies() -> None:
    lines, problems = read_lines(b"\n".join(_line(i) for i in range(3)) + b"\n\n", EP, 10)
    assert problems == [] and [(ln.number, ln.custom_id, ln.model) for ln in lines] == [
        (1, "c0", "chat-default"), (2, "c1", "chat-default"), (3, "c2", "chat-default")]
    assert orjson.loads(lines[0].body) == {"model": "chat-default", "messages": []}


@pytest.mark.parametrize(("raw", "code", "param"), [
    (b"{not json", "invalid_json_line", None),
    (b"[1, 2]", "invalid_json_line", None),
    (_line(1, custom_id=""), "missing_required_parameter", "custom_id"),
    (_line(1, custom_id="x" * 513), "invalid_value", "custom_id"),
    (_line(1, method="GET"), "invalid_method", "method"),
    (_line(1, url="/v1/embeddings"), "invalid_url", "url"),
    (_line(1, body="text"), "missing_required_parameter", "body"),
    (_line(1, body={"messages": []}), "missing_required_parameter", "body.model"),
    (_line(1, body={"model": "m", "stream": True}), "invalid_value", "body.stream"),
    (_line(1, extra=1), "invalid_value", None),
])
def test_a_bad_line_is_a_problem_naming_its_line_and_field(raw: bytes, code: str, param: str | None) -> None:
    lines, problems = read_lines(_line(0) + b"\n" + raw, EP, 10)
    assert lines == [] and [(p.code, p.line, p.param) for p in problems] == [(code, 2, param)]
    assert "{not json" not in problems[0].message  # the line's text is never echoed


def test_a_file_with_many_problems_reports_a_bounded_number_and_limits_hold() -> None:
    _, problems = read_lines(b"\n".join(b"nope" for _ in range(100)), EP, 1000)
    assert len(problems) == MAX_PROBLEMS
    _, problems = read_lines(b"\n".join(_line(i) for i in range(5)), EP, 4)
    assert [p.code for p in problems] == ["too_many_requests"]
    assert [p.code for p in read_lines(b"\n \n", EP, 4)[1]] == ["empty_file"]
    _, problems = read_lines(_line(1) + b"\n" + _line(1), EP, 4)
    assert [(p.code, p.line) for p in problems] == [("duplicate_custom_id", 2)]


@pytest.mark.parametrize(("status", "headers", "verdict"), [
    (200, {}, "ok"),
    (429, {"Retry-After": "2", "x-should-retry": "true"}, "later"),  # the key's limits: run it later
    (503, {"Retry-After": "1"}, "later"),  # the door's overload, a draining pod
    (429, {"x-should-retry": "false"}, "error"),  # the budget is spent: the line's final answer
    (400, {"x-should-retry": "false"}, "error"),
    (502, {}, "error"),
])
def test_what_an_answer_means_for_the_line(status: int, headers: dict, verdict: str) -> None:
    assert outcome(status, headers) == verdict


def test_retry_after_is_bounded() -> None:
    assert retry_after_s({}) == 1 and retry_after_s({"Retry-After": "7"}) == 7
    assert retry_after_s({"Retry-After": "junk"}) == 1 and retry_after_s({"Retry-After": "99999"}) == 3600


def test_what_a_probe_answer_says_of_its_deployment() -> None:
    from proxy.batches.canary import status_of

    assert status_of(200, b"{}", None, 10.0, 10.25).status == "up"
    refused = status_of(429, b'{"error": {"code": "provider_capacity", "message": "full"}}', None, 10.0, 10.1)
    assert refused.status == "degraded" and refused.last_error == "429 provider_capacity: full"
    assert status_of(None, b"", "no answer: TimeoutError", 10.0, 20.0).status == "down"
    assert status_of(503, b'{"error": {"code": "server_overloaded"}}', None, 10.0, 10.0) is None  # our own door
