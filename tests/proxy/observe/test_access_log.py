"""The access log: one JSON line per request with the request's ids, who, where, outcome, time, tokens and
cost; never a body, a virtual key or a provider key. Level and format come from the settings."""

from __future__ import annotations

import io
import logging

import orjson
import pytest

from farebox.logs import configure_logging
from farebox.settings_observe import LoggingSettings
from tests.proxy.fakes import SECRETS
from tests.proxy.observe.pod import CHAT, running_pod

pytestmark = pytest.mark.filterwarnings("ignore::aiohttp.web_exceptions.NotAppKeyWarning")
PROMPT = "The secret plan is tangerine-42."


@pytest.fixture
def captured():
    out = io.StringIO()
    yield out
    logger = logging.getLogger("farebox")
    for h in [h for h in logger.handlers if h.get_name() == "farebox"]:
        logger.removeHandler(h)
    logger.setLevel(logging.NOTSET)
    logger.propagate = True
    logging.getLogger("farebox.access").disabled = False


def lines(out: io.StringIO) -> list[dict]:
    return [orjson.loads(line) for line in out.getvalue().splitlines() if line]


async def test_one_json_line_per_request_with_its_fields_and_no_bodies_or_secrets(captured) -> None:
    configure_logging(LoggingSettings(level="info", format="json"), captured)
    body = {**CHAT, "messages": [{"role": "user", "content": PROMPT}]}
    async with running_pod() as pod:
        ok = await pod.post(body, **{"x-request-id": "caller-1"})
        stream = await pod.post({**body, "stream": True})
        failover = await pod.post({**body, "model": "chat-failover"})
        unknown = await pod.post({**body, "model": "no-such-alias"})
        for r in (ok, stream, failover, unknown):
            await r.read()
        costs = {e.request_id: e.cost_micro for e in pod.log.events if e.type == "request.settled"}
        plaintext = pod.auth["Authorization"].split()[1]
        await pod.client.get("/metrics")  # open routes are not logged
    access = [line for line in lines(captured) if line.get("event") == "access"]
    assert len(access) == 4
    first, streamed, failed_over, refused = access
    assert first["client_request_id"] == "caller-1" and first["request_id"].startswith("req_")
    assert first["status"] == 200 and first["key_id"] and first["team"] == "platform"
    assert first["alias"] == "chat-default" and first["deployment"] and first["attempts"] == 1
    assert first["tokens"]["input"] > 0 and first["tokens"]["output"] > 0
    assert first["cost_micro"] == costs[first["request_id"]] > 0 and first["latency_ms"] > 0
    assert first["ttft_ms"] is None and streamed["ttft_ms"] > 0
    assert failed_over["attempts"] == 2 and failed_over["deployment"] == "sim-openai-mumbai"
    assert refused["status"] == 404 and "alias" not in refused and refused["team"] == "platform"
    text = captured.getvalue()
    assert "tangerine" not in text and "Say hello" not in text  # no bodies
    assert plaintext not in text and all(secret not in text for secret in SECRETS.values())


async def test_level_and_format_are_settings(captured) -> None:
    configure_logging(LoggingSettings(level="warning", format="json"), captured)
    async with running_pod() as pod:
        await (await pod.post(CHAT)).read()
    assert not [line for line in lines(captured) if line.get("event") == "access"]  # access lines are info
    configure_logging(LoggingSettings(level="info", format="text", access_log=True), captured)
    async with running_pod() as pod:
        await (await pod.post(CHAT)).read()
    text = captured.getvalue()
    assert "farebox.access: POST /v1/chat/completions 200" in text and "team=platform" in text
    configure_logging(LoggingSettings(level="debug", format="json", access_log=False), captured)
    before = captured.getvalue()
    async with running_pod() as pod:
        await (await pod.post(CHAT)).read()
    assert '"event":"access"' not in captured.getvalue()[len(before):]
