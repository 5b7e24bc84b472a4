"""One real stack (simulator + gateway processes) shared by the end-to-end tests."""

from __future__ import annotations

from typing import Iterator

import openai
import pytest

from tests.harness import Stack, mint, running_stack, wait_key_live

# One alias per provider dialect, each on its one deployment.
ALIAS_DEPLOYMENT = {"chat-openai": "sim-openai-mumbai", "chat-anthropic": "sim-anthropic-mumbai",
                    "chat-azure": "sim-azure-mumbai", "chat-bedrock": "sim-bedrock-mumbai",
                    "chat-gemini": "sim-gemini-mumbai"}
DIALECT_ALIASES = list(ALIAS_DEPLOYMENT)
# The Responses surface's three ways to a deployment: passed through (chat-openai serves the Responses API),
# translated to OpenAI chat (chat-compat serves chat only), translated to Anthropic Messages (chat-anthropic).
RESPONSES_ALIASES = ["chat-openai", "chat-compat", "chat-anthropic"]


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("stack")) as st:
        yield st


@pytest.fixture(scope="session")
def client(stack: Stack) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=stack.gateway_url + "/v1", api_key=stack.key, max_retries=0) as c:
        yield c


@pytest.fixture(scope="session")
def embed_only_key(stack: Stack) -> str:
    key = mint(stack.config, "kyc-ops", "kyc-summariser", "embed-default")
    wait_key_live(stack.gateway_url, key)
    return key


@pytest.fixture(params=DIALECT_ALIASES)
def alias(request: pytest.FixtureRequest) -> str:
    return request.param
