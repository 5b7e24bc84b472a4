"""What the worker projects into Redis for the pods, and how pods read it.

Keys (``prefix`` defaults to ``fb:``):

* ``{prefix}scope:{scope}``: hash per scope of its current period: ``period``,
  ``settled``, ``held``, ``leased``, ``overrun``, ``requests``, ``limit``
  (empty: unlimited), ``state`` (``ok`` | ``soft`` | ``hard``, decided by
  ``ledger.thresholds.budget_state``: soft once the period's soft-threshold
  notice was decided, hard once settled + held + leased reaches the limit);
* ``{prefix}lease:{lease_id}``: the grant as JSON (expires with the lease),
  also published on ``{prefix}grants:{pod}`` so the pod learns it at once.

A projection is a cache of the ledger, never a source of truth: replay
compares it with balances rebuilt from events.
"""

from __future__ import annotations

from typing import Any

import orjson
import redis.asyncio as aioredis

from ledger.codec import to_dict
from ledger.events import LeaseGranted
from ledger.leases import PeriodTotals


def scope_fields(period: str, totals: PeriodTotals, limit: int | None, state: str) -> dict[str, Any]:
    """The hash of one scope; ``state`` is ``ledger.thresholds.budget_state``."""
    return {"period": period, "settled": totals.settled, "held": totals.held, "leased": totals.leased,
            "overrun": totals.overrun, "requests": totals.requests, "limit": "" if limit is None else limit,
            "state": state}


class RedisProjections:
    def __init__(self, client: aioredis.Redis, prefix: str = "fb:") -> None:
        self.client = client
        self.prefix = prefix

    async def scopes(self, rows: dict[str, dict[str, Any]]) -> None:
        """Write many scopes' hashes in one round trip."""
        if not rows:
            return
        pipe = self.client.pipeline(transaction=False)
        for scope, fields in rows.items():
            pipe.hset(f"{self.prefix}scope:{scope}", mapping=fields)
        await pipe.execute()

    async def grant(self, granted: LeaseGranted, ttl_s: int) -> None:
        body = orjson.dumps(to_dict(granted))
        pipe = self.client.pipeline(transaction=False)
        pipe.set(f"{self.prefix}lease:{granted.lease_id}", body, ex=max(ttl_s, 1))
        pipe.publish(f"{self.prefix}grants:{granted.pod}", body)
        await pipe.execute()

    async def read_scope(self, scope: str) -> dict[str, str]:
        raw = await self.client.hgetall(f"{self.prefix}scope:{scope}")
        return {k.decode(): v.decode() for k, v in raw.items()}

    async def all_scopes(self) -> dict[str, dict[str, str]]:
        out = {}
        async for key in self.client.scan_iter(match=f"{self.prefix}scope:*", count=500):
            scope = key.decode()[len(self.prefix) + len("scope:"):]
            out[scope] = await self.read_scope(scope)
        return out
