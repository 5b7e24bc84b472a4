"""Measure the simulator's own ceiling: ``python -m infra.simulator.bench``.

Starts the simulator in-process on a free port and drives it with an aiohttp
client at fixed concurrency (default 50) with a ~4 KB prompt and 32 output
tokens, non-stream and stream, for both dialects. Client and server share one
event loop and one core, so the figures are a floor for the server alone.
A gateway benchmark should print its own figures as ratios to these.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from dataclasses import dataclass

import aiohttp
import orjson

from infra.simulator.app import start
from infra.simulator.config import ModelProfile, SimulatorConfig
from infra.simulator.generation import VOCAB

PROMPT = " ".join(VOCAB[i % len(VOCAB)] for i in range(800))[:4096]


@dataclass
class Result:
    name: str
    requests: int
    errors: int
    seconds: float
    latencies: list[float]

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def line(self) -> str:
        lat = sorted(self.latencies) or [0.0]
        p50 = statistics.median(lat) * 1000
        p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000
        return (f"{self.name:<26} {self.rps:9.0f} req/s  {self.rps * 32:10.0f} tok/s  "
                f"p50 {p50:6.2f} ms  p99 {p99:6.2f} ms  errors {self.errors}")


def _request(dialect: str, stream: bool, base: str) -> tuple[str, dict, dict]:
    if dialect == "openai":
        body = {"model": "bench", "messages": [{"role": "user", "content": PROMPT}], "max_completion_tokens": 64}
        if stream:
            body |= {"stream": True, "stream_options": {"include_usage": True}}
        return base + "/v1/chat/completions", body, {"Authorization": "Bearer bench"}
    body = {"model": "bench", "max_tokens": 64, "messages": [{"role": "user", "content": PROMPT}], "stream": stream}
    return base + "/v1/messages", body, {"x-api-key": "bench", "anthropic-version": "2023-06-01"}


async def _worker(session: aiohttp.ClientSession, url: str, body: bytes, headers: dict, stream: bool,
                  deadline: float, res: Result) -> None:
    """One client loop; the body is pre-encoded and streams are read whole, to keep the client cheap."""
    while time.perf_counter() < deadline:
        t0 = time.perf_counter()
        try:
            async with session.post(url, data=body, headers=headers) as resp:
                data = await resp.read()
                ok = resp.status == 200 and (not stream or data.endswith((b"[DONE]\n\n", b"message_stop\"}\n\n")))
        except aiohttp.ClientError:
            ok = False
        if ok:
            res.requests += 1
            res.latencies.append(time.perf_counter() - t0)
        else:
            res.errors += 1


async def measure(base: str, dialect: str, stream: bool, concurrency: int, seconds: float) -> Result:
    url, obj, headers = _request(dialect, stream, base)
    body = orjson.dumps(obj)
    headers = {**headers, "Content-Type": "application/json"}
    res = Result(f"{dialect} {'stream' if stream else 'non-stream'}", 0, 0, 0.0, [])
    conn = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=conn) as session:
        warm = time.perf_counter() + min(0.5, seconds / 4)
        await asyncio.gather(*(_worker(session, url, body, headers, stream, warm, Result("", 0, 0, 0, []))
                               for _ in range(concurrency)))
        t0 = time.perf_counter()
        deadline = t0 + seconds
        await asyncio.gather(*(_worker(session, url, body, headers, stream, deadline, res)
                               for _ in range(concurrency)))
        res.seconds = time.perf_counter() - t0
    return res


async def bench(concurrency: int = 50, seconds: float = 3.0, dialects: tuple[str, ...] = ("openai", "anthropic"),
                output_tokens: int = 32) -> list[Result]:
    config = SimulatorConfig(defaults=ModelProfile(output_tokens=output_tokens))
    runner, port = await start(config, "127.0.0.1", 0)
    base = f"http://127.0.0.1:{port}"
    try:
        results = []
        for dialect in dialects:
            for stream in (False, True):
                results.append(await measure(base, dialect, stream, concurrency, seconds))
        return results
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--dialect", choices=("openai", "anthropic", "both"), default="both")
    args = parser.parse_args(argv)
    dialects = ("openai", "anthropic") if args.dialect == "both" else (args.dialect,)
    print(f"simulator ceiling: concurrency {args.concurrency}, ~{len(PROMPT)} B prompt, 32 output tokens, "
          f"{args.seconds:g} s per case (client in the same process)")
    for res in asyncio.run(bench(args.concurrency, args.seconds, dialects)):
        print(res.line())


if __name__ == "__main__":
    main()
