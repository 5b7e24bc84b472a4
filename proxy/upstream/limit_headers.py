"""What a provider says is left of its rate limits, from its answer's headers, per dialect.

* ``openai`` and ``azure_openai``: ``x-ratelimit-remaining-requests`` (the ``rpm`` mirror) and
  ``x-ratelimit-remaining-tokens`` (one tokens-per-minute quota, counting input and the output cap asked for:
  the ``itpm`` mirror; give such a deployment its TPM as ``input_tpm``);
* ``anthropic``: ``anthropic-ratelimit-requests-remaining``, ``-input-tokens-remaining``,
  ``-output-tokens-remaining`` (``rpm``, ``itpm``, ``otpm``);
* Bedrock and Gemini send none.

A value that is not a whole number is ignored (never a reason to refuse an answer). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping

_NAMES: dict[str, tuple[tuple[str, str], ...]] = {
    "openai": (("rpm", "x-ratelimit-remaining-requests"), ("itpm", "x-ratelimit-remaining-tokens")),
    "anthropic": (("rpm", "anthropic-ratelimit-requests-remaining"),
                  ("itpm", "anthropic-ratelimit-input-tokens-remaining"),
                  ("otpm", "anthropic-ratelimit-output-tokens-remaining")),
}
_NAMES["azure_openai"] = _NAMES["openai"]


def provider_remaining(dialect: str, headers: Mapping[str, str]) -> dict[str, int]:
    """Mirror name -> what the provider says is left, for the headers ``dialect`` names and ``headers`` has."""
    out: dict[str, int] = {}
    for name, header in _NAMES.get(dialect, ()):
        raw = headers.get(header)
        if raw is not None and raw.strip().isdigit() and len(raw.strip()) <= 12:
            out[name] = int(raw.strip())
    return out
