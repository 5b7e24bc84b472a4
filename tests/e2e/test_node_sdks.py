"""The official Node SDKs (``openai``, ``@anthropic-ai/sdk``; exact versions in tests/agents/package-lock.json)
against farebox's Responses and Messages surfaces, unchanged but for the base URL and key: function tools over
turns with ``previous_response_id``, the stream helpers, ``retrieve``, ``countTokens``; on both deployment
dialects (passed through and translated)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.harness import ROOT, Stack

pytestmark = pytest.mark.e2e

SCRIPT = ROOT / "tests" / "agents" / "sdk_check.mjs"


@pytest.mark.parametrize(("responses_model", "messages_model"), [("chat-openai", "chat-anthropic"),
                                                                 ("chat-anthropic", "chat-openai")])
def test_the_node_sdks_work_unchanged(stack: Stack, responses_model: str, messages_model: str) -> None:
    assert (ROOT / "tests" / "agents" / "node_modules" / "openai").exists(), "run `make agents` (make test does)"
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), "FAREBOX_URL": stack.gateway_url,
           "FAREBOX_KEY": stack.key, "RESPONSES_MODEL": responses_model, "MESSAGES_MODEL": messages_model}
    done = subprocess.run(["node", str(SCRIPT)], cwd=SCRIPT.parent, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    r, m = out["responses"], out["messages"]
    assert r["call"] == "get_weather" and r["previous"] and r["secondText"] and r["model"] == responses_model
    assert r["second"]["input_tokens"] > r["first"]["input_tokens"]  # the continued conversation was sent
    assert r["deltas"] == r["streamedText"] and r["streamedUsage"]["output_tokens"] > 0
    assert m["tool"] == "get_weather" and m["stop"] == "tool_use" and m["answer"] and m["model"] == messages_model
    assert m["text"] == m["streamedText"] and m["streamedUsage"]["output_tokens"] > 0 and m["counted"] > 0
