"""farebox provider simulator: a fake model provider speaking OpenAI and Anthropic dialects.

Modules: ``config`` (YAML -> profiles, faults, accounts), ``generation`` (token
counting rule, deterministic answers, ``x-sim-*`` overrides), ``schema_gen``
(values satisfying a JSON Schema), ``faults`` (seeded fault draws),
``billing`` (the "provider invoice"), ``export_drift`` (per-account errors
injected into that invoice's export), ``stats`` (test counters),
``embeddings`` (deterministic vectors), ``openai_wire`` / ``anthropic_wire``
(pure request parsing and response bytes), ``handlers`` (aiohttp engine),
``app`` (routes, control API, ``run``), ``bench`` (own ceiling).

Per-request headers: ``x-sim-output-tokens`` (text answers only; structured
output and tool arguments are as long as their JSON), ``x-sim-tool-call:
NAME`` (``x-sim-tool-turns: N``: only while the conversation holds fewer than N tool results), ``x-sim-cached-tokens``, ``x-sim-cache-write-tokens`` (Anthropic
only), ``x-sim-reasoning-tokens``, ``x-sim-fault: 429|500|503|529|hang|
disconnect|content_policy|context_length|stream_error|none``,
``x-sim-retry-after``, ``x-sim-ttft-ms``, ``x-sim-tokens-per-s``,
``x-sim-disconnect-after`` (tokens before ``disconnect``/``stream_error``),
``x-sim-echo: N`` (a text answer repeating the request's last text, in pieces of N characters).
Requests naming an OpenAI ``prompt_cache_key`` get automatic prefix caching (``prompt_cache``).

Usage::

    from infra.simulator.app import create_app, run
    from infra.simulator.config import load_config
    run(load_config("examples/simulator.yaml"), port=9090)
"""
