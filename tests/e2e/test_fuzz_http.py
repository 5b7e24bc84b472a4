"""Fuzzing the HTTP surface of a real gateway (and simulator): bad input never escapes.

Malformed JSON, wrong types, huge numbers, deep nesting, bad encodings
(invalid UTF-8, bodies that are not what their Content-Encoding says, unknown
encodings, a decompression bomb), oversized headers, URLs and bodies, sent to
``/v1/chat/completions``, ``/v1/embeddings``, ``/v1/models`` and the admin
API. Every case must get a 4xx in the OpenAI error shape: never a 5xx, never
plain text, never a hang (every call has a client timeout). Examples are
bounded so the file runs in well under a minute on a loaded machine.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import time
from typing import Any, Iterator
from urllib.parse import quote

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.harness import ROOT, Stack, generous_limits, running_stack

pytestmark = pytest.mark.e2e

CHAT = "/v1/chat/completions"
EMBED = "/v1/embeddings"
KEYS = "/admin/v1/keys"
BUDGET = "/admin/v1/budgets/team:platform"
CHAT_OK: dict[str, Any] = {"model": "chat-default", "messages": [{"role": "user", "content": "hi"}]}
EMBED_OK: dict[str, Any] = {"model": "embed-default", "input": "hi"}
KEY_OK: dict[str, Any] = {"team": "platform", "app": "playground", "aliases": ["chat-default"]}
BUDGET_OK: dict[str, Any] = {"monthly_limit": "1000.00"}
MAX_BODY = 4 * 1024 * 1024  # examples/farebox.yaml server.max_body_bytes
TIMEOUT = httpx.Timeout(15.0)

# (method, path, a valid body, whose token) for every endpoint that takes a body
TARGETS = [("POST", CHAT, CHAT_OK, "key"), ("POST", EMBED, EMBED_OK, "key"),
           ("POST", KEYS, KEY_OK, "admin"), ("PUT", BUDGET, BUDGET_OK, "admin")]


def fuzz(n: int) -> settings:
    """Bounded, unrecorded examples: every run is a fresh sample, and the file stays fast."""
    return settings(max_examples=n, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("fuzz"), mutate=generous_limits) as st_:
        yield st_


@pytest.fixture(scope="module")
def tokens(stack: Stack) -> dict[str, str]:
    out = subprocess.run([sys.executable, "-m", "farebox", "admin", "token", "create", "--config", str(stack.config),
                          "--name", "fuzz-admin", "--role", "admin", "--json"],
                         cwd=ROOT, check=True, capture_output=True, text=True)
    admin = json.loads(out.stdout)["token"]
    deadline = time.monotonic() + 10
    while httpx.get(stack.gateway_url + KEYS, headers={"Authorization": f"Bearer {admin}"}).status_code != 200:
        assert time.monotonic() < deadline, "admin token not live"
        time.sleep(0.1)
    return {"key": stack.key, "admin": admin}


@pytest.fixture(scope="module")
def http(stack: Stack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=stack.gateway_url, timeout=TIMEOUT) as client:
        yield client


def send(http: httpx.Client, tokens: dict[str, str], target: tuple, content: bytes,
         headers: dict[str, str] | None = None) -> httpx.Response:
    method, path, _, who = target
    hdrs = {"Authorization": f"Bearer {tokens[who]}", "Content-Type": "application/json", **(headers or {})}
    return http.request(method, path, content=content, headers=hdrs)


def assert_refused(resp: httpx.Response, *statuses: int) -> dict:
    """A 4xx (one of ``statuses`` if given) with the OpenAI error body: exactly its four fields on the model API;
    the admin API may add its list of ``problems``."""
    assert 400 <= resp.status_code < 500, f"{resp.status_code}: {resp.text[:300]}"
    if statuses:
        assert resp.status_code in statuses, f"{resp.status_code}: {resp.text[:300]}"
    assert resp.headers.get("content-type", "").startswith("application/json"), resp.text[:300]
    err = resp.json()["error"]
    fields = {"type", "code", "message", "param"}
    assert fields <= set(err) <= fields | {"problems"}, err
    assert err["message"] and err["code"] and (set(err) == fields or resp.url.path.startswith("/admin/")), err
    return err


def assert_answered(resp: httpx.Response) -> None:
    """Success, or a refusal in the OpenAI shape; never a 5xx."""
    if resp.status_code >= 400:
        assert_refused(resp)
    else:
        assert 200 <= resp.status_code < 300, resp.text[:300]


def encode(body: Any) -> bytes:
    """Compact JSON, integers of any size (orjson stops at 64 bits)."""
    return json.dumps(body, separators=(",", ":")).encode()


def with_field(body: dict, path: str, value: Any) -> dict:
    """A deep copy of ``body`` with ``path`` ("messages.0.content") set to ``value``."""
    out = orjson.loads(orjson.dumps(body))
    node: Any = out
    *parents, last = path.split(".")
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return out


target_st = st.sampled_from(TARGETS)
leaf = st.booleans() | st.integers(-10, 10) | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8)
json_st = st.recursive(leaf | st.none(), lambda kids: st.lists(kids, max_size=3)
                       | st.dictionaries(st.text(max_size=6), kids, max_size=3), max_leaves=8)

# --------------------------------------------------------------------------- malformed JSON


def _truncated(raw: bytes) -> st.SearchStrategy[bytes]:
    return st.integers(0, len(raw) - 1).map(lambda i: raw[:i])


@fuzz(60)
@given(data=st.data(), target=target_st)
def test_malformed_json(http, tokens, data, target) -> None:
    raw = orjson.dumps(target[2])
    content = data.draw(st.one_of(
        _truncated(raw),
        st.binary(max_size=64),
        st.text(max_size=32).map(str.encode),
        json_st.filter(lambda v: not isinstance(v, dict)).map(orjson.dumps),  # JSON, not an object
        st.tuples(st.integers(0, len(raw)), st.sampled_from([b"{", b"}", b",", b":", b'"', b"]", b"\x00", b"NaN"]))
        .map(lambda t: raw[:t[0]] + t[1] + raw[t[0]:]),
    ))
    try:
        still_json = isinstance(json.loads(content), dict)  # a character inserted inside a string stays JSON
    except ValueError:
        still_json = False
    resp = send(http, tokens, target, content)
    if still_json:
        assert_answered(resp)
    else:
        assert_refused(resp, 400, 404)


# --------------------------------------------------------------------------- wrong types

NOT_STR = st.booleans() | st.integers() | st.floats(allow_nan=False) | st.lists(leaf, max_size=2) | st.dictionaries(
    st.text(max_size=4), leaf, max_size=2)
NOT_INT = st.booleans() | st.floats(allow_nan=False) | st.text(max_size=6) | st.lists(leaf, max_size=2) | st.dictionaries(
    st.text(max_size=4), leaf, max_size=2)
NOT_NUMBER = st.booleans() | st.text(max_size=6) | st.lists(leaf, max_size=2) | st.dictionaries(
    st.text(max_size=4), leaf, max_size=2)
NOT_BOOL = st.integers() | st.floats(allow_nan=False) | st.text(max_size=6) | st.lists(leaf, max_size=2)
NOT_LIST = st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=6) | st.dictionaries(
    st.text(max_size=4), leaf, max_size=2)
NOT_OBJECT = st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=6) | st.lists(leaf, max_size=2)
NOT_CONTENT = st.booleans() | st.integers() | st.floats(allow_nan=False) | st.dictionaries(
    st.text(max_size=4), leaf, max_size=2)
WRONG = [
    (TARGETS[0], "model", NOT_STR), (TARGETS[0], "messages", NOT_LIST), (TARGETS[0], "stream", NOT_BOOL),
    (TARGETS[0], "max_completion_tokens", NOT_INT), (TARGETS[0], "max_tokens", NOT_INT), (TARGETS[0], "n", NOT_INT),
    (TARGETS[0], "temperature", NOT_NUMBER), (TARGETS[0], "top_p", NOT_NUMBER),
    (TARGETS[0], "presence_penalty", NOT_NUMBER), (TARGETS[0], "tools", NOT_LIST),
    (TARGETS[0], "stream_options", NOT_OBJECT), (TARGETS[0], "response_format", NOT_OBJECT),
    (TARGETS[0], "stop", NOT_CONTENT), (TARGETS[0], "tool_choice", NOT_CONTENT),
    (TARGETS[0], "messages.0", NOT_OBJECT), (TARGETS[0], "messages.0.role", NOT_STR),
    (TARGETS[0], "messages.0.content", NOT_CONTENT),
    (TARGETS[1], "model", NOT_STR), (TARGETS[1], "input", NOT_CONTENT), (TARGETS[1], "dimensions", NOT_INT),
    (TARGETS[1], "encoding_format", NOT_STR),
    (TARGETS[2], "team", NOT_STR), (TARGETS[2], "app", NOT_STR), (TARGETS[2], "aliases", NOT_LIST),
    (TARGETS[2], "rpm", NOT_INT), (TARGETS[2], "expires_at", NOT_STR.filter(lambda v: not isinstance(v, (int, float)))),
    (TARGETS[3], "monthly_limit", NOT_STR.filter(lambda v: not isinstance(v, (int, float)))),
    (TARGETS[3], "soft_pct", NOT_INT),
]


@fuzz(80)
@given(data=st.data(), case=st.sampled_from(WRONG))
def test_wrong_types(http, tokens, data, case) -> None:
    target, field, wrong = case
    value = data.draw(wrong, label=field)
    assert_refused(send(http, tokens, target, encode(with_field(target[2], field, value))))


# --------------------------------------------------------------------------- huge numbers

NUMERIC = [(TARGETS[0], "max_completion_tokens"), (TARGETS[0], "max_tokens"), (TARGETS[0], "n"),
           (TARGETS[0], "temperature"), (TARGETS[0], "top_p"), (TARGETS[0], "frequency_penalty"),
           (TARGETS[1], "dimensions"), (TARGETS[3], "soft_pct")]
HUGE = st.one_of(
    st.integers(min_value=10**7, max_value=2**63 - 1).map(str),
    st.integers(max_value=-(10**7), min_value=-(2**63)).map(str),
    st.integers(min_value=20, max_value=400).map(lambda n: "9" * n),  # beyond 64 bits
    st.floats(min_value=1e7, allow_infinity=False).map(repr),
    st.floats(max_value=-1e7, allow_infinity=False).map(repr),
    st.sampled_from(["1e400", "-1e400", "123456789012345678901234567890.5"]),
)


@fuzz(60)
@given(case=st.sampled_from(NUMERIC), number=HUGE)
def test_huge_numbers(http, tokens, case, number) -> None:
    target, field = case
    body = encode(with_field(target[2], field, 0))
    body = body.replace(f'"{field}":0'.encode(), f'"{field}":{number}'.encode())
    assert_refused(send(http, tokens, target, body))


# --------------------------------------------------------------------------- deep nesting


@fuzz(30)
@given(target=target_st, depth=st.integers(65, 5000), opener=st.sampled_from([b"[", b'{"a":']))
def test_deep_nesting(http, tokens, target, depth, opener) -> None:
    closer = b"]" if opener == b"[" else b"}"
    raw = orjson.dumps(target[2])
    body = raw[:-1] + b',"metadata":' + opener * depth + b"1" + closer * depth + b"}"
    assert_refused(send(http, tokens, target, body), 400)


# --------------------------------------------------------------------------- bad encodings

INVALID_UTF8 = [b"\xff", b"\xfe\xff", b"\xc3\x28", b"\xa0\xa1", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\xc0\xaf"]


@fuzz(30)
@given(target=target_st, bad=st.sampled_from(INVALID_UTF8), at=st.integers(0, 30))
def test_invalid_utf8(http, tokens, target, bad, at) -> None:
    raw = orjson.dumps(target[2])
    i = raw.index(b'"', raw.index(b":")) + 1 + at % 2  # inside the first string value
    assert_refused(send(http, tokens, target, raw[:i] + bad + raw[i:]), 400)


@fuzz(40)
@given(target=target_st, encoding=st.sampled_from(["gzip", "GZIP", "x-gzip", "deflate"]),
       junk=st.binary(min_size=1, max_size=64))
def test_body_not_in_its_content_encoding(http, tokens, target, encoding, junk) -> None:
    compressed = gzip.compress(orjson.dumps(target[2]))
    content = junk if junk[:1] != b"\x1f" else compressed[: len(compressed) // 2] + junk
    assert_refused(send(http, tokens, target, content, {"Content-Encoding": encoding}))


@fuzz(30)
@given(target=target_st, encoding=st.one_of(
    st.sampled_from(["br", "zstd", "deflate", "compress", "x-gzip", "gzip, deflate", "identity, gzip", "*"]),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=12)))
def test_unknown_content_encoding(http, tokens, target, encoding) -> None:
    if encoding in ("gzip", "identity"):
        return
    err = assert_refused(send(http, tokens, target, orjson.dumps(target[2]), {"Content-Encoding": encoding}), 415)
    assert err["code"] == "unsupported_content_encoding"


@pytest.mark.parametrize("target", TARGETS[:3], ids=["chat", "embeddings", "admin"])
def test_decompression_bomb_is_413(http, tokens, target) -> None:
    bomb = gzip.compress(orjson.dumps(target[2])[:-1] + b',"x":"' + b"0" * (MAX_BODY + 1) + b'"}')
    assert len(bomb) < 64 * 1024
    assert_refused(send(http, tokens, target, bomb, {"Content-Encoding": "gzip"}), 413)


# --------------------------------------------------------------------------- oversized headers, URLs, bodies


@fuzz(30)
@given(target=st.sampled_from([*TARGETS, ("GET", "/v1/models", None, "key")]), size=st.integers(8200, 48 * 1024),
       name=st.sampled_from(["x-fuzz", "x-request-id", "cookie", "authorization", "user-agent"]))
def test_oversized_header(http, tokens, target, size, name) -> None:
    err = assert_refused(send(http, tokens, target, orjson.dumps(target[2]), {name: "a" * size}), 431)
    assert "aaaa" not in err["message"]


@fuzz(10)
@given(count=st.integers(129, 400))
def test_too_many_headers(http, tokens, count) -> None:
    headers = {f"x-fuzz-{i}": "v" for i in range(count)}
    assert_refused(send(http, tokens, TARGETS[0], orjson.dumps(CHAT_OK), headers), 431)


@fuzz(10)
@given(size=st.integers(8200, 32 * 1024), prefix=st.sampled_from(["/v1/models/", "/admin/v1/keys/", "/v1/"]))
def test_oversized_url(http, tokens, size, prefix) -> None:
    resp = http.get(prefix + "m" * size, headers={"Authorization": f"Bearer {tokens['key']}"})
    assert_refused(resp, 431)


@pytest.mark.parametrize("target", TARGETS, ids=["chat", "embeddings", "admin-keys", "admin-budget"])
def test_oversized_body_is_413(http, tokens, target) -> None:
    body = orjson.dumps(target[2])[:-1] + b',"x":"' + b"x" * MAX_BODY + b'"}'
    assert_refused(send(http, tokens, target, body), 413)


# --------------------------------------------------------------------------- models and routes


@fuzz(40)
@given(segment=st.text(st.characters(min_codepoint=0x20, exclude_categories=("Cs", "Cc")), min_size=1, max_size=80),
       query=st.text(max_size=40))
def test_models_paths_and_queries(http, tokens, segment, query) -> None:
    auth = {"Authorization": f"Bearer {tokens['key']}"}
    assert_answered(http.get("/v1/models", params={"q": query}, headers=auth))
    resp = http.get("/v1/models/" + quote(segment, safe="/:@!$&'()*+,;="), headers=auth)
    assert_answered(resp)


@fuzz(40)
@given(target=target_st, value=json_st)
def test_any_json_object_is_answered(http, tokens, target, value) -> None:
    """A random object (random keys, random values) mixed into a valid body: success or a refusal, never a 5xx."""
    body = {**target[2], **value} if isinstance(value, dict) else {**target[2], "extra": value}
    assert_answered(send(http, tokens, target, encode(body)))


def test_gateway_still_serves(http, tokens) -> None:
    resp = send(http, tokens, TARGETS[0], orjson.dumps(CHAT_OK))
    assert resp.status_code == 200, resp.text
