"""Bad input: every case an OpenAI-shaped error with the right status, nothing half-written."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import httpx
import pytest

from tests.harness import Stack, mint, wait_key_live

pytestmark = pytest.mark.e2e

CHAT = "/v1/chat/completions"
OK_BODY = {"model": "chat-default", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def http(stack: Stack):
    with httpx.Client(base_url=stack.gateway_url, headers={"Authorization": f"Bearer {stack.key}"}, timeout=10) as c:
        yield c


def assert_error(resp: httpx.Response, status: int, code: str | None = None, param: str | None = None) -> dict:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    err = resp.json()["error"]
    assert set(err) == {"type", "code", "message", "param"}
    assert err["message"]
    if code is not None:
        assert err["code"] == code
    if param is not None:
        assert err["param"] == param
    return err


@pytest.mark.parametrize(
    ("content", "code"),
    [(b"{not json", "invalid_json"), (b"", "invalid_json"), (b"[1, 2]", "invalid_json"), (b"\xff\xfe", "invalid_json")],
)
def test_malformed_json(http: httpx.Client, content: bytes, code: str) -> None:
    assert_error(http.post(CHAT, content=content, headers={"content-type": "application/json"}), 400, code)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": [{"role": "user", "content": "x"}]}, "model"),
        ({"model": "chat-default"}, "messages"),
        ({"model": "chat-default", "messages": []}, "messages"),
        ({"model": "chat-default", "messages": "hello"}, "messages"),
        ({"model": 42, "messages": [{"role": "user", "content": "x"}]}, "model"),
        ({"model": "chat-default", "messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
        ({"model": "chat-default", "messages": [{"role": "user"}]}, "messages[0].content"),
        ({"model": "chat-default", "messages": [{"role": "user", "content": 7}]}, "messages[0].content"),
        ({**OK_BODY, "max_completion_tokens": "ten"}, "max_completion_tokens"),
        ({**OK_BODY, "max_completion_tokens": 0}, "max_completion_tokens"),
        ({**OK_BODY, "max_completion_tokens": 10**9}, "max_completion_tokens"),
        ({**OK_BODY, "temperature": 3}, "temperature"),
        ({**OK_BODY, "stream": "yes"}, "stream"),
        ({**OK_BODY, "stream_options": {"include_usage": True}}, "stream_options"),
        ({**OK_BODY, "tools": [{"type": "function"}]}, "tools[0]"),
        ({**OK_BODY, "tool_choice": "required"}, "tool_choice"),
        ({**OK_BODY, "response_format": {"type": "yaml"}}, "response_format"),
    ],
)
def test_missing_or_wrongly_typed_fields(http: httpx.Client, body: dict, param: str) -> None:
    assert_error(http.post(CHAT, json=body), 400, param=param)


def test_unknown_alias(http: httpx.Client) -> None:
    assert_error(http.post(CHAT, json={**OK_BODY, "model": "gpt-nope"}), 404, "model_not_found", "model")


def test_alias_not_allowed_for_key(stack: Stack) -> None:
    key = mint(stack.config, "kyc-ops", "kyc-summariser", "embed-default")
    wait_key_live(stack.gateway_url, key)
    resp = httpx.post(stack.gateway_url + CHAT, json=OK_BODY, headers={"Authorization": f"Bearer {key}"})
    assert_error(resp, 403, "model_not_allowed", "model")


def test_wrong_kind_of_alias(http: httpx.Client) -> None:
    assert_error(http.post(CHAT, json={**OK_BODY, "model": "embed-default"}), 400, "wrong_model_kind")
    resp = http.post("/v1/embeddings", json={"model": "chat-default", "input": "x"})
    assert_error(resp, 400, "wrong_model_kind")


def test_embeddings_bad_input(http: httpx.Client) -> None:
    assert_error(http.post("/v1/embeddings", json={"model": "embed-default"}), 400, param="input")
    assert_error(http.post("/v1/embeddings", json={"model": "embed-default", "input": [1.5]}), 400, param="input")


def test_body_over_limit_is_413(http: httpx.Client) -> None:
    big = {"model": "chat-default", "messages": [{"role": "user", "content": "x" * (5 * 1024 * 1024)}]}
    assert_error(http.post(CHAT, json=big), 413, "request_too_large")


@pytest.mark.parametrize(
    ("header", "code"),
    [(None, "missing_api_key"), ("Bearer", "invalid_api_key"), ("Basic abc", "invalid_api_key"),
     ("Bearer fb-dev-wrong", "invalid_api_key")],
)
def test_bad_key_is_401(stack: Stack, header: str | None, code: str) -> None:
    headers = {"Authorization": header} if header is not None else {}
    assert_error(httpx.post(stack.gateway_url + CHAT, json=OK_BODY, headers=headers), 401, code)


def test_expired_key_is_401(stack: Stack) -> None:
    expires = datetime.now(timezone.utc) + timedelta(seconds=4)
    key = mint(stack.config, "platform", "playground", "chat-default", "--expires-at", expires.isoformat())
    wait_key_live(stack.gateway_url, key)
    time.sleep(max((expires - datetime.now(timezone.utc)).total_seconds(), 0) + 0.2)
    resp = httpx.post(stack.gateway_url + CHAT, json=OK_BODY, headers={"Authorization": f"Bearer {key}"})
    assert_error(resp, 401, "expired_api_key")


def test_data_class_above_ceiling_is_403(http: httpx.Client) -> None:
    resp = http.post(CHAT, json=OK_BODY, headers={"x-fb-data-class": "restricted"})
    assert_error(resp, 403, "data_class_not_allowed")
    assert_error(http.post(CHAT, json=OK_BODY, headers={"x-fb-data-class": "secret-ish"}), 400, "invalid_data_class")


def test_unknown_route_and_method(http: httpx.Client) -> None:
    assert_error(http.get("/v1/nothing-here"), 404, "unknown_url")
    assert_error(http.get(CHAT), 405, "method_not_allowed")


def test_request_id_is_honoured(http: httpx.Client) -> None:
    resp = http.post(CHAT, json=OK_BODY, headers={"x-request-id": "client-7c1e2b"})
    assert resp.status_code == 200
    assert resp.headers["x-request-id"] == "client-7c1e2b"
    assert resp.headers["x-fb-request-id"].startswith("req_")
    err = http.post(CHAT, json={}, headers={"x-request-id": "client-err-1"})
    assert err.headers["x-request-id"] == "client-err-1"


def test_gateway_survives_all_of_it(http: httpx.Client) -> None:
    assert http.post(CHAT, json=OK_BODY).status_code == 200
