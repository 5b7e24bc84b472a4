"""Embedded mode end to end: the gateway archives its log as it serves, and an auditor's replay equals live."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import urllib.request
from datetime import datetime, timezone

import openai
import pytest

from streams.archive.manifest import verify
from streams.archive.read import read_archive
from tests.harness import ROOT, read_events, running_stack, stop

pytestmark = pytest.mark.e2e


def fast_archive(tree: dict) -> None:
    tree["archive"] = {"flush_interval_s": 0.2, "flush_events": 10}


def metric(url: str, name: str) -> float:
    text = urllib.request.urlopen(url + "/metrics", timeout=5).read().decode()
    found = re.search(rf"^{name} ([0-9.e+-]+)$", text, re.M)
    assert found, f"{name} not on /metrics"
    return float(found.group(1))


def farebox(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "farebox", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def test_serve_archives_as_it_runs_and_replay_equals_live(tmp_path) -> None:
    with running_stack(tmp_path / "stack", mutate=fast_archive) as stack:
        with openai.OpenAI(base_url=stack.gateway_url + "/v1", api_key=stack.key, max_retries=0) as client:
            for i in range(36):
                alias = ("chat-openai", "chat-anthropic", "chat-default")[i % 3]
                if i % 4 == 0:
                    with client.chat.completions.with_streaming_response.create(
                            model=alias, messages=[{"role": "user", "content": f"stream {i}"}], stream=True,
                            stream_options={"include_usage": True}) as s:
                        for _ in s.iter_lines():
                            pass
                else:
                    client.chat.completions.create(model=alias, messages=[{"role": "user", "content": f"hi {i}"}])
        root = stack.folder / "archive"
        deadline = time.monotonic() + 20
        while metric(stack.gateway_url, "farebox_archive_lag_events") > 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert metric(stack.gateway_url, "farebox_archive_lag_events") == 0  # archived while serving
        assert metric(stack.gateway_url, "farebox_archive_lag_seconds") == 0
        today = datetime.now(timezone.utc).date()
        assert read_archive(root, today, today).num_rows > 0
        live = farebox("replay", "--config", str(stack.config), "--from", str(today), "--to", str(today))
        assert live.returncode == 0, live.stdout + live.stderr  # while the gateway runs, reading its log
        stop(stack.gateway)  # SIGTERM: the final pass archives what the last requests appended
        events = read_events(stack.events_path)
    assert len([e for e in events if e.type == "request.settled"]) == 36
    table = read_archive(root, today, today)
    assert sorted(table.column("id").to_pylist()) == sorted(e.id for e in events)
    done = farebox("replay", "--config", str(stack.config), "--from", str(today), "--to", str(today))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"read {len(events)} archived event(s), skipped 0 unreadable" in done.stdout
    assert "0 difference(s)" in done.stdout and "behind" not in done.stdout
    checked = farebox("archive", "verify", "--config", str(stack.config))
    assert checked.returncode == 0 and "intact" in checked.stdout, checked.stdout + checked.stderr
    assert verify(root).intact


def test_lag_is_on_metrics_and_the_shutdown_pass_archives_the_rest(tmp_path) -> None:
    """Passes far apart: the requests stay unarchived (lag on /metrics) until SIGTERM's final pass."""

    def slow_archive(tree: dict) -> None:
        tree["archive"] = {"flush_interval_s": 3600, "flush_events": 1_000_000}

    with running_stack(tmp_path / "stack", mutate=slow_archive) as stack:
        with openai.OpenAI(base_url=stack.gateway_url + "/v1", api_key=stack.key, max_retries=0) as client:
            client.chat.completions.create(model="chat-openai", messages=[{"role": "user", "content": "first"}])
            # the first pending events are archived at once (the pass spawns the archiver's child, which can
            # take seconds on a loaded box); the next pass is an hour away
            deadline = time.monotonic() + 60
            while metric(stack.gateway_url, "farebox_archive_lag_events") > 0:
                assert time.monotonic() < deadline, "the first pass never finished"
                time.sleep(0.1)
            for i in range(5):
                client.chat.completions.create(model="chat-openai", messages=[{"role": "user", "content": f"{i}"}])
        time.sleep(0.5)
        assert metric(stack.gateway_url, "farebox_archive_lag_events") >= 15  # admitted, attempted, settled x 5
        assert metric(stack.gateway_url, "farebox_archive_lag_seconds") > 0
        assert stop(stack.gateway) == 0
        events = read_events(stack.events_path)
    today = datetime.now(timezone.utc).date()
    assert sorted(read_archive(tmp_path / "stack" / "archive", today, today).column("id").to_pylist()) == sorted(
        e.id for e in events)
    done = farebox("replay", "--config", str(stack.config), "--from", str(today), "--to", str(today))
    assert done.returncode == 0 and "0 difference(s)" in done.stdout, done.stdout + done.stderr
