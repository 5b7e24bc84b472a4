"""The cloud dialects end to end, on their own stack: chat-default failing over across all five dialects,
Vertex AI through google-auth (a service account's signed assertion exchanged at the simulator's token
endpoint, then bearer tokens), Azure with a Microsoft Entra bearer, and a Bedrock signature the provider
refuses. Each answer's events carry the deployment's own token types, priced at its own prices."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Iterator

import httpx
import openai
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from ledger.events import RequestAttempted, RequestSettled
from tests.harness import EXAMPLES, Stack, read_events, running_stack

pytestmark = pytest.mark.e2e
VERTEX_EMAIL = "farebox-sim@sim-project.iam.gserviceaccount.com"
FIVE = ["sim-openai-mumbai", "sim-anthropic-mumbai", "sim-azure-mumbai", "sim-bedrock-mumbai", "sim-gemini-mumbai"]
MODELS = {"sim-openai-mumbai": "sim-gpt-mid-2026-08", "sim-anthropic-mumbai": "sim-claude-mid-2026-08",
          "sim-azure-mumbai": "sim-azure-gpt-mid", "sim-bedrock-mumbai": "sim.nova-mid-v1:0",
          "sim-gemini-mumbai": "sim-gemini-flash-2026-09"}


def _service_account(port_holder: dict) -> tuple[str, str]:
    """(service-account JSON key, public key PEM) for a fresh RSA key; its token_uri is the simulator's."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    info = {"type": "service_account", "project_id": "sim-project", "private_key_id": "k1", "private_key": private,
            "client_email": VERTEX_EMAIL, "client_id": "1", "token_uri": "http://127.0.0.1:{port}/token"}
    return json.dumps(info), public


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    folder: Path = tmp_path_factory.mktemp("cloud")
    sa_json, public = _service_account({})

    def gateway(tree: dict) -> None:
        sim_port = next(d["base_url"] for d in tree["deployments"] if d["id"] == "sim-openai-mumbai").split(":")[2][:5]
        sim = f"http://127.0.0.1:{sim_port.rstrip('/')}"
        secrets = folder / "cloud-secrets.env"
        secrets.write_text((EXAMPLES / "secrets.env").read_text()
                           + "SIM_VERTEX_SA=" + sa_json.replace("{port}", sim.rsplit(":", 1)[1]) + "\n"
                           + "SIM_ENTRA_TOKEN=sim-azure-retail-0001\nSIM_AWS_WRONG=AKIASIMRETAIL0001:not-the-secret\n")
        secrets.chmod(0o600)
        tree["secrets_file"] = str(secrets)
        gemini = next(d for d in tree["deployments"] if d["id"] == "sim-gemini-mumbai")
        azure = next(d for d in tree["deployments"] if d["id"] == "sim-azure-mumbai")
        bedrock = next(d for d in tree["deployments"] if d["id"] == "sim-bedrock-mumbai")
        tree["deployments"] += [
            {**gemini, "id": "sim-vertex", "auth": "google_oauth", "api_key_env": "SIM_VERTEX_SA", "weight": 1,
             "base_url": sim + "/v1/projects/sim-project/locations/asia-south1/publishers/google"},
            {**azure, "id": "sim-azure-entra", "auth": "entra", "api_key_env": "SIM_ENTRA_TOKEN", "weight": 1,
             "base_url": sim + "/openai/v1", "api_version": None},
            {**bedrock, "id": "sim-bedrock-wrong", "api_key_env": "SIM_AWS_WRONG", "weight": 1},
        ]
        tree["deployments"][-2].pop("api_version")
        default = next(a for a in tree["aliases"] if a["name"] == "chat-default")
        default["retry_budget"] = {"pct": 100, "min": 1000, "window_s": 10}  # these tests fail over on purpose
        tree["aliases"] += [{"name": "chat-vertex", "kind": "chat", "deployments": ["sim-vertex"]},
                            {"name": "chat-entra", "kind": "chat", "deployments": ["sim-azure-entra"]},
                            {"name": "chat-bedrock-wrong", "kind": "chat", "deployments": ["sim-bedrock-wrong"],
                             "max_attempts": 1},
                            {"name": "chat-filtered", "kind": "chat",
                             "deployments": ["sim-azure-first", "sim-openai-standby"]},
                            {"name": "chat-filtered-failover", "kind": "chat", "content_filter_failover": True,
                             "deployments": ["sim-azure-first", "sim-openai-standby"]}]
        openai_dep = next(d for d in tree["deployments"] if d["id"] == "sim-openai-mumbai")
        tree["deployments"] += [{**azure, "id": "sim-azure-first", "weight": 1},  # Azure first, OpenAI after it
                                {**openai_dep, "id": "sim-openai-standby", "weight": 0}]

    def simulator(tree: dict) -> None:
        tree["accounts"].append({"name": "acct-vertex", "api_key": "unused-vertex-key",
                                 "google_client_email": VERTEX_EMAIL, "google_public_key": public})

    with running_stack(folder, mutate=gateway, sim_mutate=simulator,
                       aliases="chat-default,chat-vertex,chat-entra,chat-bedrock-wrong,chat-filtered,"
                               "chat-filtered-failover") as st:
        yield st


@pytest.fixture(scope="module")
def client(stack: Stack) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=stack.gateway_url + "/v1", api_key=stack.key, max_retries=0) as c:
        yield c


def _attempts(stack: Stack, request_id: str) -> list[RequestAttempted]:
    return [e for e in read_events(stack.events_path) if isinstance(e, RequestAttempted)
            and e.request_id == request_id]


def _faults(stack: Stack, deps: list[str], kind: str, rate: float) -> None:
    for dep in deps:
        httpx.post(f"{stack.sim_url}/_sim/models/{MODELS[dep]}", json={"faults": {kind: rate}}).raise_for_status()


def test_chat_default_tries_all_five_dialects_before_giving_up(stack: Stack, client: openai.OpenAI):
    """Every deployment's model fails with a 500: five attempts, one per dialect, the weighted two first."""
    _faults(stack, FIVE, "rate_500", 1.0)
    try:
        with pytest.raises(openai.InternalServerError) as info:
            client.chat.completions.create(model="chat-default", messages=[{"role": "user", "content": "anyone?"}])
    finally:
        _faults(stack, FIVE, "rate_500", 0.0)
    assert info.value.response.headers["x-fb-attempts"] == "5"
    attempts = _attempts(stack, info.value.response.headers["x-fb-request-id"])
    assert sorted(a.deployment for a in attempts[:2]) == sorted(FIVE[:2])  # weighted first, then the standbys
    assert sorted(a.deployment for a in attempts) == sorted(FIVE)
    assert {a.provider for a in attempts} == {"sim-openai", "sim-anthropic", "sim-azure", "sim-bedrock", "sim-gemini"}


@pytest.mark.parametrize("stream", [False, True])
def test_chat_default_fails_over_to_a_standby(stack: Stack, client: openai.OpenAI, stream: bool):
    """All but the Gemini deployment fail: the answer comes from it, after the weighted two were tried."""
    _faults(stack, FIVE[:-1], "rate_500", 1.0)
    try:
        msgs = [{"role": "user", "content": "fail over please"}]
        if stream:
            with client.chat.completions.with_streaming_response.create(
                    model="chat-default", messages=msgs, stream=True, stream_options={"include_usage": True}) as s:
                headers = s.headers
                lines = [ln for ln in s.iter_lines() if ln.startswith("data: {")]
            assert json.loads(lines[-1][6:])["x_farebox"]["deployment"] == "sim-gemini-mumbai"
        else:
            raw = client.chat.completions.with_raw_response.create(model="chat-default", messages=msgs)
            headers = raw.headers
            assert raw.parse().choices[0].message.content
    finally:
        _faults(stack, FIVE[:-1], "rate_500", 0.0)
    attempts = _attempts(stack, headers["x-fb-request-id"])
    assert headers["x-fb-deployment"] == "sim-gemini-mumbai" and headers["x-fb-attempts"] == str(len(attempts))
    assert sorted(a.deployment for a in attempts[:2]) == sorted(FIVE[:2])
    assert [a.outcome == "ok" for a in attempts] == [False] * (len(attempts) - 1) + [True]


def test_vertex_through_google_auth(stack: Stack, client: openai.OpenAI):
    first = client.chat.completions.with_raw_response.create(
        model="chat-vertex", messages=[{"role": "user", "content": "hello vertex"}], max_completion_tokens=16)
    assert first.headers["x-fb-deployment"] == "sim-vertex" and first.parse().choices[0].message.content
    with client.chat.completions.stream(model="chat-vertex", messages=[{"role": "user", "content": "again"}]) as s:
        final = s.get_final_completion()
    assert final.choices[0].message.content
    log = (stack.folder / "gateway.log").read_text()
    assert "PRIVATE KEY" not in log and "ya29." not in log


@pytest.mark.parametrize("stream", [False, True])
def test_vertex_is_asked_for_a_tier_and_priced_as_served(stack: Stack, client: openai.OpenAI, stream: bool):
    """``service_tier: flex`` to Vertex AI goes as its shared-request-type header; the answer's ``trafficType``
    (ON_DEMAND_FLEX) prices the attempt at the deployment's flex prices."""
    msgs = [{"role": "user", "content": "a flexible answer"}]
    if stream:
        with client.chat.completions.with_streaming_response.create(
                model="chat-vertex", messages=msgs, stream=True, extra_body={"service_tier": "flex"}) as s:
            list(s.iter_lines())
            rid = s.headers["x-fb-request-id"]
    else:
        raw = client.chat.completions.with_raw_response.create(model="chat-vertex", messages=msgs,
                                                                extra_body={"service_tier": "flex"})
        rid = raw.headers["x-fb-request-id"]
    (attempt,) = _attempts(stack, rid)
    usage = attempt.usage
    assert attempt.deployment == "sim-vertex" and usage.service_tier == "flex"
    usd = (usage.input * Decimal("0.15") + usage.cached_input * Decimal("0.015")
           + (usage.output + usage.reasoning) * Decimal("1.25")) / 1_000_000
    assert attempt.cost_micro == int((usd * 88 * 1_000_000).to_integral_value(rounding="ROUND_CEILING"))


def test_azure_with_an_entra_bearer(client: openai.OpenAI):
    raw = client.chat.completions.with_raw_response.create(model="chat-entra", messages=[{"role": "user", "content": "hi"}])
    assert raw.headers["x-fb-deployment"] == "sim-azure-entra" and raw.parse().choices[0].message.content


def test_a_refused_signature_is_a_provider_auth_failure_without_the_secret(stack: Stack, client: openai.OpenAI):
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(model="chat-bedrock-wrong", messages=[{"role": "user", "content": "x"}])
    assert info.value.status_code == 502 and info.value.code == "provider_auth_failed"
    assert "not-the-secret" not in info.value.response.text
    assert "not-the-secret" not in (stack.folder / "gateway.log").read_text()


@pytest.mark.parametrize("dep", FIVE[2:])
def test_each_cloud_dialect_is_metered_at_its_own_prices(stack: Stack, client: openai.OpenAI, dep: str):
    """A request pinned to each cloud deployment (a fault on the others): usage by token type and its cost."""
    others = [d for d in FIVE if d != dep]
    _faults(stack, others, "rate_503", 1.0)
    try:
        raw = client.chat.completions.with_raw_response.create(
            model="chat-default", messages=[{"role": "user", "content": "price me"}],
            extra_headers={"x-sim-cached-tokens": "4"})
    finally:
        _faults(stack, others, "rate_503", 0.0)
    assert raw.headers["x-fb-deployment"] == dep
    rid = raw.headers["x-fb-request-id"]
    events = read_events(stack.events_path)
    ok = [e for e in events if isinstance(e, RequestAttempted) and e.request_id == rid and e.outcome == "ok"]
    settled = [e for e in events if isinstance(e, RequestSettled) and e.request_id == rid]
    assert len(ok) == 1 and len(settled) == 1
    usage, resp = ok[0].usage, raw.parse()
    assert usage.source == "provider" and usage.cached_input == 4
    assert usage.input + usage.cached_input + usage.cache_write == resp.usage.prompt_tokens
    prices = {"sim-azure-mumbai": ("2.50", "1.25", "10.00"), "sim-bedrock-mumbai": ("0.80", "0.20", "3.20"),
              "sim-gemini-mumbai": ("0.30", "0.03", "2.50")}[dep]
    usd = (usage.input * Decimal(prices[0]) + usage.cached_input * Decimal(prices[1])
           + (usage.output + usage.reasoning) * Decimal(prices[2])) / 1_000_000
    assert ok[0].cost_micro == int((usd * 88 * 1_000_000).to_integral_value(rounding="ROUND_HALF_EVEN"))
    assert settled[0].cost_micro == ok[0].cost_micro


def test_a_filtered_prompt_is_final_unless_the_alias_fails_over_on_it(stack: Stack, client: openai.OpenAI):
    """Azure's content filter refuses the prompt (a 400 naming the categories); only an alias with
    content_filter_failover tries the next provider."""
    _faults(stack, ["sim-azure-mumbai"], "rate_content_policy", 1.0)
    try:
        msgs = [{"role": "user", "content": "something the filter dislikes"}]
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(model="chat-filtered", messages=msgs)
        served = client.chat.completions.with_raw_response.create(model="chat-filtered-failover", messages=msgs)
    finally:
        _faults(stack, ["sim-azure-mumbai"], "rate_content_policy", 0.0)
    assert info.value.code == "content_policy_violation" and "violence (high)" in info.value.message
    assert info.value.response.headers["x-fb-attempts"] == "1"
    assert served.headers["x-fb-deployment"] == "sim-openai-standby" and served.headers["x-fb-attempts"] == "2"
