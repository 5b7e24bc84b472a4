"""``farebox reconcile`` end to end: a real simulator and gateway, traffic through the openai SDK.

Each scenario runs its own stack (export drift and faults are per account and
per day, so they must not leak): clean traffic reconciles with nothing
flagged; an export scaled by 0.97 is flagged at about 3%, a token type the gateway never sees is named unpriced; streams cut
mid-way by the simulator make our usage estimated and the flagged row names
that share; a gateway killed mid-stream loses usage the simulator billed and
the row names the expired hold.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

import httpx
import openai
import pytest

from ledger.events import HoldExpired, RequestAdmitted, RequestSettled
from ledger.reconcile_events import ReconcileReported
from tests.harness import ROOT, Stack, read_events, running_stack

pytestmark = pytest.mark.e2e

OPENAI_ACCOUNT, ANTHROPIC_ACCOUNT = "acct-retail", "acct-retail-anthropic"
CLOUD_ACCOUNTS = ["acct-retail-aws", "acct-retail-azure", "acct-retail-gemini"]  # the standbys' (no traffic here)


def reconcile(stack: Stack, *args: str) -> tuple[int, dict, str]:
    """Run the command; (exit status, the JSON report it printed, stderr)."""
    today = datetime.now(timezone.utc).date().isoformat()
    out = subprocess.run([sys.executable, "-m", "farebox", "reconcile", "--config", str(stack.config),
                          "--date", today, "--format", "json", *args],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    report = json.loads(out.stdout) if out.stdout.strip() else {}
    return out.returncode, report, out.stderr


def wait_for(stack: Stack, kind: type, count: int, timeout: float = 15.0) -> list:
    """Until the gateway's log holds ``count`` events of ``kind`` (its writes are durable a moment later)."""
    deadline = time.monotonic() + timeout
    while True:
        found = [e for e in read_events(stack.events_path) if isinstance(e, kind)]
        if len(found) >= count or time.monotonic() > deadline:
            assert len(found) >= count, f"{len(found)} {kind.__name__} events, expected {count}"
            return found
        time.sleep(0.1)


def chat(client: openai.OpenAI, alias: str, n: int, stream: bool = False, **headers: str) -> None:
    for i in range(n):
        messages = [{"role": "user", "content": f"Reconcile request {i}: summarise the quarterly figures."}]
        if stream:
            for _ in client.chat.completions.create(model=alias, messages=messages, stream=True,
                                                    extra_headers=headers):
                pass
        else:
            client.chat.completions.create(model=alias, messages=messages, extra_headers=headers)


def rows_of(report: dict, account: str, measure: str = "tokens") -> list[dict]:
    return [r for r in report["rows"] if r["account"] == account and r["measure"] == measure]


def test_clean_day_then_a_scaled_export(tmp_path: Path):
    with running_stack(tmp_path) as stack, \
            openai.OpenAI(base_url=stack.gateway_url + "/v1", api_key=stack.key, max_retries=0) as client:
        chat(client, "chat-openai", 4)
        chat(client, "chat-openai", 2, stream=True)
        chat(client, "chat-anthropic", 3, stream=True)
        wait_for(stack, RequestSettled, 9)

        status, report, err = reconcile(stack)
        assert status == 0, err
        assert report["flagged"] == 0 and report["accounts"] == [OPENAI_ACCOUNT, ANTHROPIC_ACCOUNT, *CLOUD_ACCOUNTS]
        output = {r["account"]: r for r in report["rows"] if r["token_type"] == "output"}
        assert set(output) == {OPENAI_ACCOUNT, ANTHROPIC_ACCOUNT}
        assert all(r["provider_figure"] == r["ours"] != "0" for r in output.values())
        file = tmp_path / "reconcile" / f"{report['day']}.json"
        assert json.loads(file.read_text())["content_hash"] == report["content_hash"]

        # the same day again, unchanged: the same report and no second event
        status, again, _ = reconcile(stack)
        assert status == 0 and again["content_hash"] == report["content_hash"]
        assert again["event_id"] == report["event_id"]
        assert [e.id for e in wait_for(stack, ReconcileReported, 1)] == [report["event_id"]]

        httpx.post(f"{stack.sim_url}/_sim/accounts/{OPENAI_ACCOUNT}", json={"export_factor": "0.97"}).raise_for_status()
        status, drifted, err = reconcile(stack)
        assert status == 1, err
        flagged = [r for r in drifted["rows"] if r["flagged"]]
        assert flagged and {r["account"] for r in flagged} == {OPENAI_ACCOUNT}
        assert not any(r["flagged"] for r in rows_of(drifted, ANTHROPIC_ACCOUNT))
        for row in flagged:  # (0.97 x - x) / 0.97 x = -3.09%; counts are rounded to whole tokens
            assert Decimal("-3.4") < Decimal(row["percent"]) < Decimal("-2.8"), row
        events = wait_for(stack, ReconcileReported, 2)
        assert events[-1].id == drifted["event_id"] != report["event_id"] and events[-1].flagged == len(flagged)

        # one account only: its own file, the other account left out
        status, one, _ = reconcile(stack, "--account", ANTHROPIC_ACCOUNT)
        assert status == 0 and one["accounts"] == [ANTHROPIC_ACCOUNT]
        assert (tmp_path / "reconcile" / f"{report['day']}.{ANTHROPIC_ACCOUNT}.json").exists()

        # a token type the gateway never sees, billed 10 per request on the other account
        httpx.post(f"{stack.sim_url}/_sim/accounts/{ANTHROPIC_ACCOUNT}",
                   json={"extra_token_type": "input_audio"}).raise_for_status()
        status, extra, _ = reconcile(stack, "--account", ANTHROPIC_ACCOUNT)
        assert status == 1
        (row,) = [r for r in extra["rows"] if r["flagged"]]
        assert (row["token_type"], row["provider_figure"], row["ours"]) == ("input_audio", "30", "0")
        assert [c["code"] for c in row["causes"]] == ["unpriced_token_type"]


def test_streams_cut_mid_way_are_flagged_as_estimated_usage(tmp_path: Path):
    with running_stack(tmp_path) as stack, \
            openai.OpenAI(base_url=stack.gateway_url + "/v1", api_key=stack.key, max_retries=0) as client:
        chat(client, "chat-openai", 1, stream=True)
        for _ in range(4):
            with pytest.raises(openai.APIError):
                chat(client, "chat-openai", 1, stream=True, **{"x-sim-fault": "disconnect",
                                                                "x-sim-output-tokens": "200"})
        settled = wait_for(stack, RequestSettled, 5)
        assert sum(e.usage.source == "estimated" for e in settled) == 4

        status, report, err = reconcile(stack, "--account", OPENAI_ACCOUNT)
        assert status == 1, err
        flagged = [r for r in rows_of(report, OPENAI_ACCOUNT) if r["flagged"]]
        assert flagged, report
        for row in flagged:
            codes = [c["code"] for c in row["causes"]]
            assert "estimated_usage" in codes, row
            (estimated,) = [c["detail"] for c in row["causes"] if c["code"] == "estimated_usage"]
            assert "were estimated, not provider-reported" in estimated


def _slow_stream_then_kill(stack: Stack, client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="chat-openai", stream=True, messages=[{"role": "user", "content": "A long answer, please."}],
        extra_headers={"x-sim-output-tokens": "400", "x-sim-tokens-per-s": "20"})
    with pytest.raises(openai.APIError):
        for i, _ in enumerate(stream):
            if i == 5:  # the simulator is billing this request; the gateway has not settled it
                wait_for(stack, RequestAdmitted, 2)
                stack.gateway.kill()
                stack.gateway.wait()


def test_a_gateway_killed_mid_stream_is_flagged_as_expired_holds(tmp_path: Path):
    def short_holds(tree: dict) -> None:
        tree["server"].update(hold_ttl_s=2, sweep_interval_s=0.2)

    with running_stack(tmp_path, mutate=short_holds) as stack, \
            openai.OpenAI(base_url=stack.gateway_url + "/v1", api_key=stack.key, max_retries=0) as client:
        chat(client, "chat-openai", 1)
        wait_for(stack, RequestSettled, 1)
        _slow_stream_then_kill(stack, client)
        stack.restart_gateway()  # the sweeper finds the orphaned hold and expires it
        wait_for(stack, HoldExpired, 1)

        status, report, err = reconcile(stack, "--account", OPENAI_ACCOUNT)
        assert status == 1, err
        flagged = [r for r in rows_of(report, OPENAI_ACCOUNT) if r["flagged"]]
        assert flagged, report
        for row in flagged:
            assert Decimal(row["difference"]) > 0  # the provider billed more than we recorded
            expired = [c["detail"] for c in row["causes"] if c["code"] == "expired_holds"]
            assert expired and "expired before" in expired[0], row
