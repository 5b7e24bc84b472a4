"""The budget bench's client side: admin tokens and keys, one streaming request and what it saw.

``one`` sends a planned request (released by an ``asyncio.Event`` so a burst
starts at once), reads the stream to ``[DONE]`` and keeps what the budget
analysis needs: status, error code and message, Retry-After, the
``server-timing`` admission time, wall-clock send and receipt instants
(comparable with event times on the same machine) and the usage chunk.
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import orjson

from tests.bench.budget_plan import ALIAS, TEAM, Planned
from tests.harness import Stack
from tests.harness import admin_token as make_admin_token

# --------------------------------------------------------------------------- keys, admin token


def admin_token(stack: Stack, role: str = "finance", name: str = "bench-finance") -> str:
    return make_admin_token(stack.config, name, role, live_at=stack.gateway_url)


async def mint_keys(session: aiohttp.ClientSession, gateway_url: str, admin: str, n: int) -> list[str]:
    """n keys of the bench's team, created through the admin API (``farebox keys create`` costs ~1 s a key)."""
    body = {"team": TEAM, "app": "playground", "aliases": [ALIAS]}
    keys = []
    for _ in range(n):
        async with session.post(gateway_url + "/admin/v1/keys", json=body,
                                headers={"Authorization": f"Bearer {admin}"}) as resp:
            if resp.status != 201:
                raise RuntimeError(f"key not created: HTTP {resp.status} {await resp.text()}")
            keys.append((await resp.json())["key"])
    return keys


async def wait_admin_live(session: aiohttp.ClientSession, url: str, token: str, timeout: float = 10.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        async with session.get(url, headers={"Authorization": f"Bearer {token}"}) as resp:
            if resp.status == 200:
                return await resp.json()
            if time.monotonic() > deadline:
                raise RuntimeError(f"admin token not live: HTTP {resp.status} {await resp.text()}")
        await asyncio.sleep(0.1)


# --------------------------------------------------------------------------- one request


@dataclass
class Result:
    index: int
    status: int = 0
    sent_wall: float = 0.0
    recv_wall: float = 0.0       # headers received (wall clock, comparable with event times)
    latency_s: float = 0.0       # send -> headers
    total_s: float = 0.0         # send -> end of stream / body
    admit_ms: float | None = None
    request_id: str | None = None
    code: str | None = None
    message: str | None = None
    retry_after: str | None = None
    should_retry: str | None = None  # x-should-retry
    tries: int = 1  # 1 + the retries of budget_reserved made (as the SDK does, after Retry-After)
    usage: dict | None = None
    done: bool = False
    error: str | None = None


_TIMING_RE = re.compile(r"admit;dur=([0-9.]+)")


async def one(session: aiohttp.ClientSession, url: str, key: str, p: Planned, go: asyncio.Event,
              delay_s: float = 0.0, max_wait_ms: int | None = None, retries: int = 0) -> Result:
    """One planned request; a 429 that says ``x-should-retry: true`` is retried after its Retry-After,
    up to ``retries`` times (what the official SDKs do by default with 2)."""
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json",
               "x-sim-output-tokens": str(p.output_tokens), "x-sim-tokens-per-s": str(p.tokens_per_s)}
    if max_wait_ms is not None:
        headers["x-fb-max-wait-ms"] = str(max_wait_ms)
    await go.wait()
    if delay_s:
        await asyncio.sleep(delay_s)
    r = await _send(session, url, headers, p)
    for attempt in range(retries):
        if not (r.status == 429 and r.should_retry == "true"):
            break
        await asyncio.sleep(float(r.retry_after or 1))
        r = await _send(session, url, headers, p)
        r.tries = attempt + 2
    return r


async def _send(session: aiohttp.ClientSession, url: str, headers: dict[str, str], p: Planned) -> Result:
    r = Result(p.index)
    t0 = time.perf_counter()
    r.sent_wall = time.time()
    try:
        async with session.post(url, data=p.body, headers=headers) as resp:
            r.recv_wall = time.time()
            r.latency_s = time.perf_counter() - t0
            r.status = resp.status
            r.request_id = resp.headers.get("x-fb-request-id")
            r.retry_after = resp.headers.get("retry-after")
            r.should_retry = resp.headers.get("x-should-retry")
            m = _TIMING_RE.search(resp.headers.get("server-timing", ""))
            r.admit_ms = float(m.group(1)) if m else None
            if resp.status != 200:
                body = await resp.read()
                try:
                    err = orjson.loads(body).get("error") or {}
                    r.code, r.message = err.get("code"), err.get("message")
                except orjson.JSONDecodeError:
                    r.error = f"HTTP {resp.status}: {body[:200]!r}"
                r.total_s = time.perf_counter() - t0
                return r
            async for raw in resp.content:   # one SSE line at a time, to the end
                line = raw.strip()
                if not line.startswith(b"data: "):
                    continue
                if line == b"data: [DONE]":
                    r.done = True
                    continue
                chunk = orjson.loads(line[6:])
                if chunk.get("error"):
                    r.error = f"stream error: {chunk['error']}"
                if chunk.get("usage"):
                    r.usage = chunk["usage"]
            r.total_s = time.perf_counter() - t0
            if not r.done and r.error is None:
                r.error = "stream ended without [DONE]"
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        r.error = f"{type(exc).__name__}: {exc}"
        r.total_s = time.perf_counter() - t0
    return r


def listen_overflows() -> int | None:
    try:
        lines = Path("/proc/net/netstat").read_text().splitlines()
    except OSError:
        return None
    for head, vals in zip(lines[::2], lines[1::2]):
        if head.startswith("TcpExt:"):
            d = dict(zip(head.split()[1:], vals.split()[1:]))
            return int(d.get("ListenOverflows", 0))
    return None
