"""Chaos against the simulator: failover, breakers, 429 pauses, timeouts, broken streams, disconnects.

Each scenario gets its own pair of deployments (``<name>-a`` / ``<name>-b``,
simulator models ``sim-<name>-a`` / ``sim-<name>-b``) so breakers, pauses and
simulator faults never leak between tests. Faults are set per model at run
time through the simulator's ``POST /_sim/models/{model}``.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator
from urllib.parse import urlparse

import httpx
import pytest

from ledger.events import RequestAdmitted, RequestAttempted, RequestSettled
from streams.sqlite_log import SqliteEventLog
from tests.harness import Stack, mint, running_stack, wait_key_live

pytestmark = pytest.mark.e2e

SCENARIOS = ("flaky", "hang", "cut", "limited", "ctx", "gone", "hedged")
FAST_BREAKER = {"error_pct": 20, "min_requests": 20, "window_s": 10, "cooldown_s": 0.5, "max_cooldown_s": 2,
                "close_after": 2}


def _deployment(template: dict, dep_id: str, model: str, **extra) -> dict:
    return {**template, "id": dep_id, "model": model, "weight": 50, "limits": {}, "breaker": FAST_BREAKER, **extra}


def _chaos_config(tree: dict) -> None:
    template = {k: v for k, v in next(d for d in tree["deployments"] if d["id"] == "sim-openai-mumbai").items()}
    for name in SCENARIOS:
        tree["deployments"] += [_deployment(template, f"{name}-a", f"sim-{name}-a"),
                                _deployment(template, f"{name}-b", f"sim-{name}-b")]
        tree["aliases"].append({
            "name": f"chaos-{name}", "kind": "chat", "deployments": [f"{name}-a", f"{name}-b"],
            "timeouts": {"connect_s": 1, "first_token_s": 0.5, "total_s": 20, "idle_s": 2, "heartbeat_s": 0.3},
            "backoff_s": 0.01, "sticky": False,
            **({"hedge": {"enabled": True, "after_s": 0.15}} if name == "hedged" else {}),
        })
    # Restricted data: one external deployment that lists the class (it must still never get it) and a
    # self-hosted one that is down.
    tree["deployments"] += [
        _deployment(template, "ext-restricted", "sim-ext", data_classes=["internal", "restricted"]),
        _deployment(template, "local-restricted", "sim-local", data_classes=["internal", "restricted"],
                    self_hosted=True, breaker={**FAST_BREAKER, "min_requests": 4, "cooldown_s": 30, "max_cooldown_s": 60}),
        _deployment(template, "fb-down", "sim-fb-down"),
    ]
    tree["aliases"] += [
        {"name": "chaos-restricted", "kind": "chat", "deployments": ["ext-restricted", "local-restricted"]},
        {"name": "chaos-fallback", "kind": "chat", "deployments": ["fb-down"], "fallback_alias": "chaos-flaky-b"},
        {"name": "chaos-flaky-b", "kind": "chat", "deployments": ["flaky-b"]},
    ]
    tree["rate_limits"] = {"key_defaults": {"rpm": 1_000_000, "input_tpm": 100_000_000, "output_tpm": 100_000_000},
                           "team_tpm": {"platform": 100_000_000}, "deployment_mirror_pct": 90}


ALIASES = ",".join([f"chaos-{n}" for n in SCENARIOS] + ["chaos-restricted", "chaos-fallback"])


@pytest.fixture(scope="module")
def chaos(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("chaos"), aliases=ALIASES, mutate=_chaos_config) as st:
        yield st


@pytest.fixture(scope="module")
def http(chaos: Stack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=chaos.gateway_url, headers={"Authorization": f"Bearer {chaos.key}"}, timeout=30,
                      limits=httpx.Limits(max_connections=32)) as c:
        yield c


def sim_model(stack: Stack, model: str, **profile) -> None:
    httpx.post(f"{stack.sim_url}/_sim/models/{model}", json=profile).raise_for_status()


def sim_stats(stack: Stack, model: str) -> dict:
    models = httpx.get(f"{stack.sim_url}/_sim/stats").json()["models"]
    return models.get(model, {"requests": 0, "outcomes": {}, "closed_by_client": 0, "last_client_closes": []})


def chat(http: httpx.Client, alias: str, *, stream: bool = False, headers: dict | None = None, **body) -> httpx.Response:
    payload = {"model": alias, "messages": [{"role": "user", "content": "hello"}], "stream": stream, **body}
    return http.post("/v1/chat/completions", json=payload, headers=headers or {})


def read_all(stack: Stack) -> list:
    async def main() -> list:
        log = SqliteEventLog.open(stack.events_path, readonly=True)
        try:
            out, after = [], 0
            while batch := await log.read(after=after, limit=5000):
                out += [e for _, e in batch]
                after = batch[-1][0]
            return out
        finally:
            await log.close()

    return asyncio.run(main())


def events_for(stack: Stack, ids: set[str], wait: float = 5.0) -> list:
    deadline = time.monotonic() + wait
    while True:
        mine = [e for e in read_all(stack) if e.request_id in ids]
        if len({e.request_id for e in mine if isinstance(e, RequestSettled)}) >= len(ids) or time.monotonic() > deadline:
            return mine
        time.sleep(0.05)


def transitions(stack: Stack, dep: str) -> list[tuple[float, str]]:
    routing = httpx.get(f"{stack.gateway_url}/health").json()["routing"]
    return [(t["at"], t["state"]) for t in routing["transitions"] if t["deployment"] == dep]


def test_503_on_30pct_fails_over_within_budget_and_the_breaker_cycles(chaos: Stack, http: httpx.Client) -> None:
    sim_model(chaos, "sim-flaky-a", faults={"rate_503": 0.3})
    n = 1000
    started = time.monotonic()
    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda _: chat(http, "chaos-flaky"), range(n)))
    elapsed = time.monotonic() - started
    ok = [r for r in answers if r.status_code == 200]
    success = len(ok) / n
    ids = {r.headers["x-fb-request-id"] for r in answers}
    events = events_for(chaos, ids)
    attempts = Counter(e.request_id for e in events if isinstance(e, RequestAttempted))
    retries = sum(c - 1 for c in attempts.values())
    settled = Counter(e.request_id for e in events if isinstance(e, RequestSettled))
    admitted = Counter(e.request_id for e in events if isinstance(e, RequestAdmitted))
    assert set(settled.values()) == {1} and set(admitted.values()) == {1} and len(settled) == n
    # 10% of requests per 10 s window plus a floor of 10 per window.
    windows = int(elapsed // 10) + 1
    assert retries <= 0.10 * n + 10 * windows, (retries, n)
    assert success >= 0.999, Counter(r.status_code for r in answers)
    opened = [t for t, st in transitions(chaos, "flaky-a") if st == "open"]
    assert opened, "the breaker of flaky-a never opened"
    # The provider recovers: the half-open probes close the breaker again.
    sim_model(chaos, "sim-flaky-a", faults={"rate_503": 0.0})
    recovered = time.monotonic()
    deadline = recovered + 10
    while time.monotonic() < deadline:
        chat(http, "chaos-flaky")
        trans = transitions(chaos, "flaky-a")
        if trans and trans[-1][1] == "closed" and trans[-1][0] > time.time() - (time.monotonic() - recovered):
            break
        time.sleep(0.02)
    trans = transitions(chaos, "flaky-a")
    assert trans[-1][1] == "closed", trans
    print(f"\n503@30%: {success:.4%} ok over {n} requests in {elapsed:.1f}s, retries {retries} "
          f"({retries / n:.1%}), breaker opened {len(opened)}x, closed {time.monotonic() - recovered:.2f}s "
          f"after recovery")


def test_hang_before_first_byte_fails_over_at_the_first_token_timeout(chaos: Stack, http: httpx.Client) -> None:
    def timed(_: int) -> tuple[float, int]:
        t0 = time.monotonic()
        with http.stream("POST", "/v1/chat/completions", json={
            "model": "chaos-hang", "stream": True, "messages": [{"role": "user", "content": "hi"}],
        }) as r:
            body = b"".join(r.iter_bytes())
        assert b"[DONE]" in body
        return time.monotonic() - t0, r.status_code

    healthy = sorted(timed(0)[0] for _ in range(10))
    sim_model(chaos, "sim-hang-a", faults={"rate_hang": 1.0})  # hang-a accepts and never answers
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(timed, range(120)))
    lat = sorted(t for t, _ in results)
    assert all(code == 200 for _, code in results)
    p99 = lat[int(0.99 * len(lat)) - 1]
    bound = 0.5 + healthy[-1] + 0.25  # first-token timeout + healthy latency + backoff and scheduling slack
    assert p99 <= bound, (p99, bound)
    assert sim_stats(chaos, "sim-hang-a")["outcomes"].get("hang", 0) >= 1
    print(f"\nhang failover: p99 {p99 * 1000:.0f} ms, max {lat[-1] * 1000:.0f} ms, healthy max "
          f"{healthy[-1] * 1000:.0f} ms, first-token timeout 500 ms")


@pytest.mark.parametrize("fault", ["disconnect", "stream_error"])
def test_mid_stream_failure_ends_with_one_error_event_and_settles_delivered(
    chaos: Stack, http: httpx.Client, fault: str
) -> None:
    before = {m: sim_stats(chaos, m)["requests"] for m in ("sim-cut-a", "sim-cut-b")}
    # Paced, so the first tokens reach the caller before the failure (not all in the first read).
    with http.stream("POST", "/v1/chat/completions", headers={"x-sim-fault": fault, "x-sim-tokens-per-s": "200"}, json={
        "model": "chaos-cut", "stream": True, "messages": [{"role": "user", "content": "hi"}],
        "stream_options": {"include_usage": True},
    }) as r:
        rid = r.headers["x-fb-request-id"]
        lines = [ln for ln in r.iter_lines() if ln.startswith("data: ")]
    datas = [json.loads(ln[6:]) for ln in lines if ln != "data: [DONE]"]
    errors = [d for d in datas if "error" in d]
    text = "".join(c["delta"].get("content") or "" for d in datas if "choices" in d for c in d["choices"])
    assert len(errors) == 1 and "data: [DONE]" not in lines
    assert "error" in datas[-1]  # nothing after the error: never a second answer
    assert text  # the partial answer reached the caller
    after = {m: sim_stats(chaos, m)["requests"] for m in before}
    assert sum(after.values()) - sum(before.values()) == 1  # no failover after the first byte
    events = events_for(chaos, {rid})
    attempted = [e for e in events if isinstance(e, RequestAttempted)]
    settled = [e for e in events if isinstance(e, RequestSettled)]
    assert len(attempted) == 1 and len(settled) == 1
    assert attempted[0].usage.output >= 1 and settled[0].usage.output == attempted[0].usage.output
    assert settled[0].cost_micro > 0


def test_429_pauses_the_deployment_for_its_retry_after(chaos: Stack, http: httpx.Client) -> None:
    sim_model(chaos, "sim-limited-a", faults={"rate_429": 1.0, "retry_after_s": 2})
    t0 = None
    for _ in range(50):
        r = chat(http, "chaos-limited")
        assert r.status_code == 200  # the 429 is routed around, never shown
        if sim_stats(chaos, "sim-limited-a")["requests"] >= 1:
            t0 = time.monotonic()
            break
    assert t0 is not None, "no request reached limited-a"
    sim_model(chaos, "sim-limited-a", faults={"rate_429": 0.0})  # ready again, but the pause holds
    while time.monotonic() - t0 < 1.8:
        assert chat(http, "chaos-limited").status_code == 200
    assert sim_stats(chaos, "sim-limited-a")["requests"] == 1  # no traffic during Retry-After
    time.sleep(max(0.0, t0 + 2.1 - time.monotonic()))
    for _ in range(40):
        chat(http, "chaos-limited")
    assert sim_stats(chaos, "sim-limited-a")["requests"] > 1  # back after the pause


def test_context_length_400_is_not_retried(chaos: Stack, http: httpx.Client) -> None:
    r = chat(http, "chaos-ctx", headers={"x-sim-fault": "context_length"})
    assert r.status_code == 400
    err = r.json()["error"]
    assert "context" in (err["message"] + str(err["code"])).lower()
    assert r.headers["x-fb-attempts"] == "1"
    total = sum(sim_stats(chaos, m)["requests"] for m in ("sim-ctx-a", "sim-ctx-b"))
    assert total == 1


def _raw_stream(stack: Stack, alias: str) -> socket.socket:
    url = urlparse(stack.gateway_url)
    body = json.dumps({"model": alias, "stream": True, "messages": [{"role": "user", "content": "hi"}]}).encode()
    sock = socket.create_connection((url.hostname, url.port))
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Authorization: Bearer {stack.key}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
    )
    return sock


@pytest.mark.parametrize("phase", ["waiting_first_token", "mid_stream"])
def test_client_disconnect_closes_upstream_within_100ms(chaos: Stack, phase: str) -> None:
    models = ("sim-gone-a", "sim-gone-b")
    for m in models:
        if phase == "waiting_first_token":
            sim_model(chaos, m, ttft_ms=3000, tokens_per_s=0)
        else:
            sim_model(chaos, m, ttft_ms=0, tokens_per_s=20, output_tokens=400)
    before = sum(sim_stats(chaos, m)["closed_by_client"] for m in models)
    sock = _raw_stream(chaos, "chaos-gone")
    if phase == "mid_stream":
        got = b""
        while b"data: " not in got:  # the answer is flowing
            got += sock.recv(65536)
        time.sleep(0.2)
    else:
        time.sleep(0.3)  # the gateway is waiting on the provider's first token
    closed_at = time.time()
    sock.close()
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        stats = [sim_stats(chaos, m) for m in models]
        if sum(s["closed_by_client"] for s in stats) > before:
            break
        time.sleep(0.01)
    seen = max(c for s in stats for c in s["last_client_closes"][-1:])
    delay_ms = (seen - closed_at) * 1000
    assert delay_ms <= 100, delay_ms
    print(f"\nclient disconnect ({phase}): simulator saw its upstream close {delay_ms:.0f} ms later")


def test_restricted_data_with_only_external_deployments_healthy_is_refused(chaos: Stack) -> None:
    key = mint(chaos.config, "platform", "playground", "chaos-restricted", "--data-class-ceiling", "restricted")
    wait_key_live(chaos.gateway_url, key)
    sim_model(chaos, "sim-local", faults={"rate_503": 1.0})
    with httpx.Client(base_url=chaos.gateway_url, headers={"Authorization": f"Bearer {key}",
                                                           "x-fb-data-class": "restricted"}) as c:
        for _ in range(4):  # the self-hosted deployment fails until its breaker opens
            assert chat(c, "chaos-restricted").status_code == 503
        r = chat(c, "chaos-restricted")
    assert r.status_code == 503
    err = r.json()["error"]
    assert err["code"] == "no_deployment_available" and "restricted" in err["message"]
    assert "not sent" in err["message"] and "retry-after" in r.headers
    assert sim_stats(chaos, "sim-ext")["requests"] == 0  # never sent abroad of its class
    assert sim_stats(chaos, "sim-local")["requests"] == 4


def test_fallback_alias_only_when_the_caller_allows_it(chaos: Stack, http: httpx.Client) -> None:
    sim_model(chaos, "sim-fb-down", faults={"rate_503": 1.0})
    sim_model(chaos, "sim-flaky-b", faults={"rate_503": 0.0})
    assert chat(http, "chaos-fallback").status_code == 503
    r = chat(http, "chaos-fallback", headers={"x-fb-allow-fallback": "true"})
    assert r.status_code == 200
    assert r.headers["x-fb-deployment"] == "flaky-b" and r.headers["x-fb-attempts"] == "2"
    path = r.json()["x_farebox"]["path"]
    assert [p["deployment"] for p in path] == ["fb-down", "flaky-b"]


def test_hedge_takes_the_faster_deployment_and_meters_both(chaos: Stack, http: httpx.Client) -> None:
    # a answers after 1 s, b at once; the pick is random: when a goes first, b is hedged in after 150 ms.
    sim_model(chaos, "sim-hedged-a", ttft_ms=1000)
    hedged = 0
    for _ in range(12):
        r = chat(http, "chaos-hedged")
        # Always b: when a went first and was not hedged, a would have answered (after 1 s).
        assert r.status_code == 200 and r.headers["x-fb-deployment"] == "hedged-b", r.text[-400:]
        if r.headers["x-fb-attempts"] == "2":
            hedged += 1
            rid = r.headers["x-fb-request-id"]
            attempted = [e for e in events_for(chaos, {rid}) if isinstance(e, RequestAttempted)]
            assert sorted((e.outcome, e.error_code) for e in attempted) == [("client_closed", "hedge_lost"), ("ok", None)]
            assert all(e.cost_micro > 0 for e in attempted)  # both are charged to the caller
    assert hedged >= 1


def test_slow_stream_gets_heartbeats(chaos: Stack, http: httpx.Client) -> None:
    # 1 token/s: gaps of ~1 s between chunks, above the 0.3 s heartbeat and below the 2 s idle timeout.
    with http.stream("POST", "/v1/chat/completions", headers={"x-sim-tokens-per-s": "1", "x-sim-output-tokens": "3"},
                     json={"model": "chaos-ctx", "stream": True, "messages": [{"role": "user", "content": "hi"}]}) as r:
        raw = b"".join(r.iter_bytes())
    assert b": keep-alive" in raw and raw.rstrip().endswith(b"data: [DONE]")

