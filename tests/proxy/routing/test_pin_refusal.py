"""A pinned key (regions / deployments) whose allowed deployments are all unavailable: the refusal says
the pin kept the request from the alias's other deployments, OpenAI-shaped, naming no provider key.

Routing-time refusals (every allowed deployment's circuit open) are checked here on ``route``; the
refusal after failed attempts (the provider answering 503) end to end in tests/e2e/test_pin_refusal.py.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import yaml

from proxy.control.declarative import CONTROL_SECTIONS, compile_snapshot
from proxy.errors import UpstreamRateLimited, UpstreamUnavailable
from proxy.outcomes import FAILED
from proxy.routing.router import Needs, NoDeploymentAvailable, PinnedUnavailable, pinned_refusal, route
from proxy.routing.state import RoutingState
from tests.harness import EXAMPLES, without_standbys

HOME, ABROAD = "sim-openai-mumbai", "sim-anthropic-mumbai"
PROVIDER_KEYS = [line.split("=", 1)[1] for line in (EXAMPLES / "secrets.env").read_text().splitlines()
                 if "=" in line and not line.startswith("#")]


def _two_regions(tree: dict) -> None:
    for dep in tree["deployments"]:
        if dep["id"] == ABROAD:
            dep["region"] = "us-east-1"
            dep["data_classes"] = ["public", "internal"]  # confidential traffic must not cross regions
    tree["rate_limits"]["key_defaults"] = {"rpm": 100_000, "input_tpm": 10_000_000, "output_tpm": 10_000_000}


def snapshot():
    tree = {k: v for k, v in yaml.safe_load((Path(EXAMPLES) / "farebox.yaml").read_text()).items()
            if k in CONTROL_SECTIONS}
    _two_regions(without_standbys(tree))
    snap = compile_snapshot(tree, ())
    assert snap is not None
    return snap


def open_circuit(state: RoutingState, dep) -> None:
    for _ in range(60):  # past min_requests, all failing (the breaker refuses starts once open)
        state.start(dep, 0.0)
        state.finish(dep, FAILED, 0.0)


def assert_names_no_provider_key(text: str) -> None:
    assert PROVIDER_KEYS and not any(secret in text for secret in PROVIDER_KEYS)
    assert "SIM_OPENAI_KEY" not in text and "api_key" not in text


@pytest.mark.parametrize("pin", [{"regions": frozenset({"ap-south-1"})}, {"allowed": frozenset({HOME})}])
def test_open_circuit_on_every_allowed_deployment_blames_the_pin(pin) -> None:
    snap = snapshot()
    alias, state = snap.aliases["chat-default"], RoutingState(clock=lambda: 0.0)
    open_circuit(state, snap.deployments[HOME])
    with pytest.raises(PinnedUnavailable) as err:
        route(snap, alias, Needs((), "internal", 10, **pin), state, 1.0, random.Random())
    exc = err.value
    assert isinstance(exc, NoDeploymentAvailable)  # chain_for still tries the fallback alias on it
    assert exc.status == 503 and exc.headers["Retry-After"]
    body = exc.to_body()["error"]
    assert (body["type"], body["code"]) == ("api_error", "pinned_deployments_unavailable")
    pinned_to = "region(s) ap-south-1" if "regions" in pin else f"deployment(s) {HOME}"
    assert f"pinned to {pinned_to}" in body["message"]
    assert f"{HOME} (circuit open)" in body["message"]
    assert f"other deployment ({ABROAD})" in body["message"] and "not sent elsewhere" in body["message"]
    assert "provider unavailable" not in body["message"].lower()
    assert_names_no_provider_key(body["message"])
    # without the pin the request goes abroad, as before
    assert [d.id for d in route(snap, alias, Needs((), "internal", 10), state, 1.0, random.Random())] == [ABROAD]


def test_a_pin_that_rules_nothing_out_keeps_the_plain_refusal() -> None:
    snap = snapshot()
    alias, state = snap.aliases["chat-default"], RoutingState(clock=lambda: 0.0)
    for dep in alias.deployments:
        open_circuit(state, snap.deployments[dep])
    both = Needs((), "internal", 10, regions=frozenset({"ap-south-1", "us-east-1"}))
    with pytest.raises(NoDeploymentAvailable) as err:
        route(snap, alias, both, state, 1.0, random.Random())
    assert not isinstance(err.value, PinnedUnavailable) and err.value.code == "no_deployment_available"


def test_failed_attempts_are_told_as_the_pins_doing_but_not_rate_limits() -> None:
    snap = snapshot()
    alias, regions = snap.aliases["chat-default"], frozenset({"ap-south-1"})
    cause = UpstreamUnavailable("Upstream (sim-openai) is unavailable (HTTP 503).", upstream_status=503)
    told = pinned_refusal(snap, alias, "internal", regions, None, cause)
    assert isinstance(told, PinnedUnavailable) and told.status == 503
    assert "last error: Upstream (sim-openai) is unavailable (HTTP 503)" in told.message
    assert pinned_refusal(snap, alias, "internal", None, None, cause) is cause  # not pinned
    capacity = UpstreamRateLimited("full", retry_after=3)
    assert pinned_refusal(snap, alias, "internal", regions, None, capacity) is capacity  # a 429 stays a 429
    # restricted data may go to neither (no self-hosted deployment): the pin kept nothing from it
    assert pinned_refusal(snap, alias, "restricted", regions, None, cause) is cause
