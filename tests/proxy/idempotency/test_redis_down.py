"""Without its Redis the shared store refuses (503, retryable) rather than risk billing a retry twice."""

from __future__ import annotations

import pytest

from infra.process import free_port
from proxy.idempotency import Record
from proxy.idempotency.redis_store import IdempotencyUnavailable, RedisIdempotency


async def test_an_unreachable_redis_is_a_retryable_503() -> None:
    store = RedisIdempotency.from_url(f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.2)
    try:
        with pytest.raises(IdempotencyUnavailable) as err:
            await store.claim("k:a", Record("req_1", "fp", "pending"), 60)
        assert err.value.status == 503 and err.value.retryable and err.value.headers["Retry-After"] == "1"
        assert "redis://" not in err.value.message  # no address (or password) in the answer
        with pytest.raises(IdempotencyUnavailable):
            await store.release("k:a", "req_1")
    finally:
        await store.close()
