"""Real coding agents pointed at farebox by their base-URL settings, unchanged (``tests/agents``: the npm packages
at the exact versions of its package-lock.json, installed by ``make test``), against the provider simulator.

Claude Code (the Anthropic Messages API): a three-turn session in which the model calls the agent's own
``Read`` tool twice (``x-sim-tool-call`` through the agent's ``ANTHROPIC_CUSTOM_HEADERS``) then answers. Through
farebox the agent's requests are passed through to the Anthropic deployment as written: its adaptive
``thinking`` (the simulator signs thinking blocks and refuses any passed back altered, so three successful turns
prove they went back untouched), ``cache_control`` breakpoints (written, then read the next turn), a system turn
among the messages, its ``anthropic-beta`` features. Its system prompt carries an e-mail address, so the privacy
policy redacts before the deployment: the passthrough carries the placeholders. The usage the agent reports
(summed over its turns) is the usage farebox metered, type by type, and each request's cost is its usage at the
deployment's prices, to the micro-rupee.

Codex (the OpenAI Responses API): a session in which the model calls the agent's ``get_goal`` function twice,
then answers, configured as its documentation says for a custom provider (``model_providers`` in its
``config.toml``: farebox's base URL, the key's environment variable, ``wire_api = "responses"``). Its requests
(built-in ``web_search`` and ``namespace`` tool groups, ``store: false``, encrypted reasoning asked for) pass
through to the deployment that serves the Responses API; its ``prompt_cache_key`` has the simulator cache the
conversation's prefix, so later requests read cached tokens; the usage it reports for the turn (cached tokens
included) is farebox's, summed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest

from ledger.request_events import RequestAdmitted, RequestAttempted, RequestSettled
from ledger.usage import TokenUsage
from pricing.book import Price
from pricing.rating import rate
from tests.harness import ROOT, Stack, minted, read_events, wait_key_live

pytestmark = pytest.mark.e2e

AGENTS = ROOT / "tests" / "agents" / "node_modules" / ".bin"
ANTHROPIC_PRICE = Price(input=Decimal("3.00"), cached_input=Decimal("0.30"), cache_write=Decimal("3.75"),
                        output=Decimal("15.00"))  # examples/farebox.yaml, sim-anthropic-mumbai
OPENAI_PRICE = Price(input=Decimal("2.00"), cached_input=Decimal("0.20"), output=Decimal("10.00"))  # sim-openai-mumbai
FX = Decimal("88.00")


def _agent(name: str) -> str:
    path = AGENTS / name
    assert path.exists(), f"{path} is missing: run `make agents` (make test installs it)"
    return str(path)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A short working folder: an agent writes its paths into its prompts, and a long random-looking one (pytest's
    tmp_path, named after the test) reads to the privacy scanner as a secret token, a restricted data class."""
    folder = Path(tempfile.mkdtemp(prefix="fb", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _home(folder: Path) -> dict[str, str]:
    """An environment of the agent's own: a fresh home, no proxies, nothing inherited that points elsewhere."""
    home = folder / "h"
    home.mkdir()
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "TERM", "TMPDIR")}
    return {**keep, "HOME": str(home), "USER": "farebox-test"}


def _requests_of(stack: Stack, key_id: str, deadline_s: float = 10.0) -> dict[str, list]:
    """request id -> its events, for every request of ``key_id`` (waits until each is settled)."""
    end = time.monotonic() + deadline_s
    while True:
        events = read_events(stack.events_path)
        ids = {e.request_id for e in events if isinstance(e, RequestAdmitted) and e.key_id == key_id}
        settled = {e.request_id for e in events if isinstance(e, RequestSettled)}
        if (ids and ids <= settled) or time.monotonic() > end:
            return {rid: [e for e in events if e.request_id == rid] for rid in ids}
        time.sleep(0.1)


def test_claude_code_runs_a_tool_session_through_farebox(stack: Stack, short_dir: Path) -> None:
    made = minted(stack.config, "platform", "playground", "chat-anthropic", "--data-class-ceiling", "confidential")
    key = made["key"]
    wait_key_live(stack.gateway_url, key)
    project = short_dir / "p"
    project.mkdir()
    (project / "README.md").write_text("# Demo\nA project for the agent to read.\n")
    env = {**_home(short_dir), "ANTHROPIC_BASE_URL": stack.gateway_url, "ANTHROPIC_API_KEY": key,
           "ANTHROPIC_MODEL": "chat-anthropic", "ANTHROPIC_SMALL_FAST_MODEL": "chat-anthropic",
           "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "16000",  # the alias's max_output_tokens_cap is 16384
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1",
           "ANTHROPIC_CUSTOM_HEADERS": "x-sim-tool-call: Read\nx-sim-tool-turns: 2"}
    done = subprocess.run([_agent("claude"), "-p", "Read the README and summarise it.", "--max-turns", "5",
                           "--output-format", "json"], cwd=project, env=env, capture_output=True, text=True,
                          timeout=180)
    out = done.stdout
    assert done.returncode == 0, (out[-3000:], done.stderr[-2000:])
    result = json.loads(out.strip().splitlines()[-1])  # --output-format json: one result object
    assert result["is_error"] is False and result["num_turns"] == 3 and result["terminal_reason"] == "completed", result

    requests = _requests_of(stack, made["id"])
    assert len(requests) >= 3, requests
    total = TokenUsage()
    for rid, events in requests.items():
        admitted = next(e for e in events if isinstance(e, RequestAdmitted))
        attempted = [e for e in events if isinstance(e, RequestAttempted)]
        settled = next(e for e in events if isinstance(e, RequestSettled))
        assert admitted.api == "messages" and admitted.privacy_action == "redact" and admitted.stream
        assert settled.final_status == 200 and len(attempted) == 1 and attempted[0].usage.source == "provider"
        u = settled.usage
        assert settled.cost_micro == rate(u, ANTHROPIC_PRICE, FX)  # to the micro-rupee at the deployment's prices
        total = TokenUsage(input=total.input + u.input, cached_input=total.cached_input + u.cached_input,
                           cache_write=total.cache_write + u.cache_write, output=total.output + u.output,
                           reasoning=total.reasoning + u.reasoning)
    seen = result["usage"]  # what the agent added up from the answers farebox gave it
    assert (seen["input_tokens"], seen["cache_read_input_tokens"], seen["cache_creation_input_tokens"],
            seen["output_tokens"]) == (total.input, total.cached_input, total.cache_write,
                                       total.output + total.reasoning)
    assert total.cache_write > 0 and total.cached_input > 0  # the breakpoints were written, then read


CODEX_CONFIG = """model = "chat-openai"
model_provider = "farebox"

[model_providers.farebox]
name = "farebox"
base_url = "{base_url}/v1"
env_key = "FAREBOX_KEY"
wire_api = "responses"
http_headers = {{ "x-sim-tool-call" = "get_goal", "x-sim-tool-turns" = "2" }}
"""


def test_codex_runs_a_tool_session_through_farebox(stack: Stack, short_dir: Path) -> None:
    made = minted(stack.config, "platform", "playground", "chat-openai")
    wait_key_live(stack.gateway_url, made["key"])
    env = {**_home(short_dir), "FAREBOX_KEY": made["key"]}
    (Path(env["HOME"]) / ".codex").mkdir()
    (Path(env["HOME"]) / ".codex" / "config.toml").write_text(CODEX_CONFIG.format(base_url=stack.gateway_url))
    project = short_dir / "p"
    project.mkdir()
    done = subprocess.run([_agent("codex"), "exec", "--skip-git-repo-check", "--json", "Check the goal, then say hello."],
                          cwd=project, env=env, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-2000:])
    turn = next(e for e in lines if e["type"] == "turn.completed")
    assert any(e["type"] == "item.completed" and e["item"]["type"] == "agent_message" for e in lines), lines

    requests = _requests_of(stack, made["id"])
    assert len(requests) == 3, requests  # two function calls answered by the agent, then the answer
    total = TokenUsage()
    for events in requests.values():
        admitted = next(e for e in events if isinstance(e, RequestAdmitted))
        settled = next(e for e in events if isinstance(e, RequestSettled))
        assert admitted.api == "responses" and settled.final_status == 200 and settled.deployment == "sim-openai-mumbai"
        assert settled.usage.source == "provider" and settled.cost_micro == rate(settled.usage, OPENAI_PRICE, FX)
        u = settled.usage
        total = TokenUsage(input=total.input + u.input, cached_input=total.cached_input + u.cached_input,
                           output=total.output + u.output, reasoning=total.reasoning + u.reasoning)
    seen = turn["usage"]
    assert (seen["input_tokens"], seen["cached_input_tokens"], seen["output_tokens"], seen["reasoning_output_tokens"]) \
        == (total.input + total.cached_input, total.cached_input, total.output + total.reasoning, total.reasoning)
    assert total.cached_input > 0  # its prompt_cache_key: turns two and three read what turn one cached
