"""The simulator's batch APIs, read by the official SDKs: OpenAI's Files and Batch API (upload, create, poll, the
output file, cancel) and Anthropic's Message Batches (create, poll, results); every line billed once, as a
``batch`` group of the usage export."""

from __future__ import annotations

import asyncio
import io
import json

import anthropic
import openai


def _lines(n: int) -> bytes:
    return b"".join(json.dumps({"custom_id": f"l{i}", "method": "POST", "url": "/v1/chat/completions",
                                "body": {"model": "gpt-sim", "max_completion_tokens": 4,
                                         "messages": [{"role": "user", "content": f"tag {i}"}]}}).encode() + b"\n"
                    for i in range(n))


async def test_openai_sdk_runs_a_batch_and_reads_its_output_file(sim) -> None:
    async with openai.AsyncOpenAI(base_url=str(sim.make_url("/v1")), api_key="sk-test", max_retries=0) as sdk:
        uploaded = await sdk.files.create(file=("in.jsonl", io.BytesIO(_lines(12))), purpose="batch")
        batch = await sdk.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                         completion_window="24h", metadata={"farebox_batch": "b1"})
        for _ in range(200):
            batch = await sdk.batches.retrieve(batch.id)
            if batch.status == "completed":
                break
            await asyncio.sleep(0.02)
        assert batch.status == "completed" and batch.request_counts.completed == 12
        lines = [json.loads(x) for x in (await sdk.files.content(batch.output_file_id)).text.splitlines()]
        assert sorted(x["custom_id"] for x in lines) == sorted(f"l{i}" for i in range(12))
        assert all(x["response"]["body"]["usage"]["completion_tokens"] == 4 for x in lines)
        assert [b.id for b in (await sdk.batches.list()).data] == [batch.id]
        assert (await sdk.batches.list()).data[0].metadata == {"farebox_batch": "b1"}
    export = await (await sim.get("/v1/usage/export")).json()
    assert [(r["requests"], r.get("service_tier")) for r in export["data"]] == [(12, "batch")]


async def test_anthropic_sdk_runs_a_message_batch_and_a_cancel_ends_it(sim) -> None:
    async with anthropic.AsyncAnthropic(base_url=str(sim.make_url("")), api_key="sk-test", max_retries=0) as sdk:
        requests = [{"custom_id": f"q{i}", "params": {"model": "claude-sim", "max_tokens": 4,
                                                      "messages": [{"role": "user", "content": f"note {i}"}]}}
                    for i in range(5)]
        batch = await sdk.messages.batches.create(requests=requests)
        for _ in range(200):
            batch = await sdk.messages.batches.retrieve(batch.id)
            if batch.processing_status == "ended":
                break
            await asyncio.sleep(0.02)
        assert batch.request_counts.succeeded == 5
        results = [r async for r in await sdk.messages.batches.results(batch.id)]
        assert sorted(r.custom_id for r in results) == [f"q{i}" for i in range(5)]
        assert all(r.result.type == "succeeded" and r.result.message.usage.output_tokens == 4 for r in results)
        await sim.post("/_sim/models/claude-sim", json={"batch_line_ms": 200})
        slow = await sdk.messages.batches.create(requests=requests)
        await sdk.messages.batches.cancel(slow.id)
        for _ in range(200):
            slow = await sdk.messages.batches.retrieve(slow.id)
            if slow.processing_status == "ended":
                break
            await asyncio.sleep(0.02)
        assert slow.processing_status == "ended" and slow.request_counts.canceled >= 4
        kinds = [r.result.type async for r in await sdk.messages.batches.results(slow.id)]
        assert kinds.count("canceled") >= 4
