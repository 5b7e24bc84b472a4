"""The dialect registry: deployment ``dialect`` name -> stateless singleton."""

from __future__ import annotations

from types import MappingProxyType

from proxy.snapshot import Deployment
from proxy.upstream.anthropic import AnthropicDialect
from proxy.upstream.azure_openai import AzureOpenAIDialect
from proxy.upstream.base import Dialect
from proxy.upstream.bedrock.dialect import BedrockConverseDialect
from proxy.upstream.bedrock.request import SERVICE_TIERS as BEDROCK_TIERS
from proxy.upstream.gemini.dialect import VERTEX_TIERS, GeminiDialect
from proxy.upstream.openai_chat import OpenAIChatDialect

DIALECTS: MappingProxyType[str, Dialect] = MappingProxyType({
    "openai": OpenAIChatDialect(),
    "anthropic": AnthropicDialect(),
    "azure_openai": AzureOpenAIDialect(),
    "bedrock_converse": BedrockConverseDialect(),
    "gemini": GeminiDialect(),
})  # fmt: skip


def get_dialect(name: str) -> Dialect:
    """The dialect for ``name``; ``KeyError`` naming it when unknown."""
    try:
        return DIALECTS[name]
    except KeyError:
        raise KeyError(f"unknown provider dialect {name!r}; known: {sorted(DIALECTS)}") from None


OPENAI_TIERS = ("flex", "priority", "scale")


def asked_tiers(dep: Deployment) -> tuple[str, ...]:
    """The service tiers besides standard a request to ``dep`` may ask for in ``service_tier``."""
    if dep.dialect == "openai":
        return OPENAI_TIERS
    if dep.dialect == "bedrock_converse":
        return BEDROCK_TIERS
    if dep.dialect == "gemini" and dep.auth == "google_oauth":
        return VERTEX_TIERS
    return ()
