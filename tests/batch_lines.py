"""A batch input file for the tests and benchmarks: ``n`` short tagging requests, one JSONL line each."""

from __future__ import annotations

import json


def tagging_batch(n: int, model: str = "chat-openai", max_tokens: int = 16) -> bytes:
    """Lines ``line-0`` .. ``line-{n-1}``, each a chat request to ``model`` for at most ``max_tokens``."""
    return b"".join(json.dumps({"custom_id": f"line-{i}", "method": "POST", "url": "/v1/chat/completions",
                                "body": {"model": model, "max_tokens": max_tokens,
                                         "messages": [{"role": "user", "content": f"Tag ticket {i}."}]}}).encode()
                    + b"\n" for i in range(n))
