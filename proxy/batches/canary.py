"""The synthetic canary: a small request to every deployment on a schedule, through the gateway's own path.

Every ``interval_s`` each gateway process sends, for each deployment that an alias lists, one tiny request
(chat: one output token; embeddings: one word) to its own gateway over the private socket
(``proxy.batches.runner``), as the platform's canary key for that deployment (``canary.<deployment>``: the team
``canary.team`` names, pinned to that one deployment, no secret; ``proxy.api.internal``). So it is metered and
charged to the platform's scope (events tagged ``fb.canary``), it feeds the deployment's breaker and health like
any request, and its answer sets the deployment's status:

* ``up``: answered 200;
* ``degraded``: refused for capacity (429: the provider's or our mirror of its limits);
* ``down``: any other answer, a timeout or no answer, with the error kept as ``last_error``.

Off by default (``canary.enabled``); statuses are this process's own, read by ``GET /admin/v1/deployments`` and
``farebox_deployment_up`` (1 up, 0.5 degraded, 0 down). Pure but for ``Canary.run`` (the sending).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable

import aiohttp
import orjson

log = logging.getLogger("farebox.canary")

CANARY_HEADER = "x-fb-canary"  # the deployment a canary request is for
LEVEL = {"up": 1.0, "degraded": 0.5, "down": 0.0}
DOOR_CODES = frozenset({"server_overloaded", "server_shutting_down", "server_busy"})  # our door, not the deployment


@dataclass(frozen=True, slots=True)
class Probe:
    deployment: str
    alias: str
    path: str  # /v1/chat/completions | /v1/embeddings
    body: bytes


@dataclass(frozen=True, slots=True)
class Status:
    status: str  # up | degraded | down
    checked_at: float
    latency_ms: int
    last_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "checked_at": round(self.checked_at, 3), "latency_ms": self.latency_ms,
                "last_error": self.last_error}


def probes(aliases: Any, deployments: Any) -> list[Probe]:
    """One probe per deployment some alias lists (through the first such alias), in deployment order."""
    first: dict[str, Any] = {}
    for alias in aliases.values():
        if alias.split is None:
            for dep in alias.deployments:
                first.setdefault(dep, alias)
    out = []
    for dep in deployments:
        alias = first.get(dep)
        if alias is None:
            continue
        if alias.kind == "embeddings":
            out.append(Probe(dep, alias.name, "/v1/embeddings", orjson.dumps({"model": alias.name, "input": "ping"})))
        else:
            out.append(Probe(dep, alias.name, "/v1/chat/completions", orjson.dumps(
                {"model": alias.name, "max_tokens": 1, "messages": [{"role": "user", "content": "ping"}]})))
    return out


def status_of(code: int | None, body: bytes, error: str | None, started: float, now: float) -> Status | None:
    """What one probe's answer says of its deployment (module docstring); None when it says nothing of it (this
    process's own door refused the probe: overloaded, shutting down)."""
    latency = int((now - started) * 1000)
    if code == 200:
        return Status("up", now, latency)
    if error is None:
        try:
            detail = orjson.loads(body).get("error", {})
            if detail.get("code") in DOOR_CODES:
                return None
            error = f"{code} {detail.get('code') or ''}: {str(detail.get('message') or '')[:200]}".strip()
        except (orjson.JSONDecodeError, AttributeError):
            error = f"{code}"
    return Status("degraded" if code == 429 else "down", now, latency, error)


class Canary:
    """Sends the probes every ``interval_s`` and keeps each deployment's last status (``statuses``)."""

    def __init__(self, interval_s: float, timeout_s: float, plan: Callable[[], list[Probe]],
                 post: Callable[[Probe, float], Any], on_status: Callable[[str, Status], None] = lambda d, s: None,
                 clock: Callable[[], float] = time.time) -> None:
        self.interval_s, self.timeout_s, self.plan, self.post = interval_s, timeout_s, plan, post
        self.on_status, self.clock = on_status, clock
        self.statuses: dict[str, Status] = {}

    async def run(self) -> None:
        while True:
            await asyncio.gather(*(self._probe(p) for p in self.plan()))
            await asyncio.sleep(self.interval_s)

    async def _probe(self, probe: Probe) -> None:
        started = self.clock()
        try:
            code, body = await asyncio.wait_for(self.post(probe, self.timeout_s), self.timeout_s)
            status = status_of(code, body, None, started, self.clock())
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            status = status_of(None, b"", f"no answer: {type(exc).__name__}", started, self.clock())
        if status is not None:
            self.statuses[probe.deployment] = status
            self.on_status(probe.deployment, status)
