"""Finance end to end (issue 12, "Done means"): a gateway serves ~100 requests through the openai SDK, its
SQLite log is archived to Parquet, and three ways of reading the money agree to the micro-unit for team
``platform`` this month: the budget API (the live ledger), ``farebox report showback`` and the plain ``duckdb``
CLI over ``reconcile/sql/views.sql``."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
import openai
import pytest

from reconcile.warehouse import VIEWS_SQL, views_preamble
from streams.archive.manifest import file_lock
from streams.archive.read import read_archive
from streams.archive.write import archive_from_log
from streams.sqlite_log import SqliteEventLog
from tests.harness import ROOT, Stack, admin_token, running_stack
from tests.reconcile.duckdb_shell import duckdb_cli

pytestmark = pytest.mark.e2e

MSG = [{"role": "user", "content": "what did we spend?"}]


def _admin_token(stack: Stack) -> str:
    return admin_token(stack.config, "finance", "finance", live_at=stack.gateway_url)


def _traffic(stack: Stack) -> int:
    """~100 requests: plain and streamed, both dialects, some with cached and reasoning tokens, some refused."""
    sent = 0
    with openai.OpenAI(base_url=stack.gateway_url + "/v1", api_key=stack.key, max_retries=0) as client:
        for i in range(100):
            alias = ("chat-default", "chat-openai", "chat-anthropic")[i % 3]
            extra = {"x-sim-cached-tokens": "8"} if i % 4 == 0 else {}
            if i % 10 == 9:
                extra["x-sim-fault"] = "500"  # some fail upstream: settled with an error status
            try:
                if i % 5 == 0:
                    stream = client.chat.completions.create(
                        model=alias, messages=MSG, max_completion_tokens=40, stream=True,
                        stream_options={"include_usage": True}, extra_headers=extra)
                    for _ in stream:
                        pass
                else:
                    client.chat.completions.create(model=alias, messages=MSG, max_completion_tokens=40,
                                                   extra_headers=extra)
            except openai.APIError:
                pass
            sent += 1
    return sent


def _budget(stack: Stack, token: str) -> dict:
    """The budget view once nothing is held (every request settled)."""
    deadline = time.monotonic() + 15
    while True:
        view = httpx.get(stack.gateway_url + "/admin/v1/budgets/team:platform",
                         headers={"Authorization": f"Bearer {token}"}).json()
        if view["held_micro"] == 0 or time.monotonic() > deadline:
            return view
        time.sleep(0.2)


async def _archive(events: Path, root: Path) -> int:
    log = SqliteEventLog.open(events, readonly=True)
    try:
        with file_lock(root / "_state" / "log.lock"):  # the serving gateway archives too
            return await archive_from_log(log, root)
    finally:
        await log.close()


def test_showback_and_duckdb_equal_the_budget_api(tmp_path: Path) -> None:
    with running_stack(tmp_path / "stack") as stack:
        token = _admin_token(stack)
        assert _traffic(stack) == 100
        time.sleep(1.2)  # the admin token reaches the gateway with the next snapshot reload
        view = _budget(stack, token)
        archive = stack.folder / "archive"  # <state_dir>/archive: where showback looks by default
        asyncio.run(_archive(stack.events_path, archive))  # what the in-process archiver has not written yet
        today = datetime.now(timezone.utc).date()
        assert read_archive(archive, today - timedelta(days=1), today + timedelta(days=1)).num_rows > 200

        assert view["held_micro"] == 0 and view["settled_micro"] > 0
        month = view["period"]
        out = subprocess.run([sys.executable, "-m", "farebox", "report", "showback", "--config", str(stack.config),
                              "--month", month, "--format", "json"], cwd=ROOT, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        [platform] = [row for row in json.loads(out.stdout) if row["team"] == "platform"]
        assert platform["budget_settled_micro"] == view["settled_micro"]
        assert platform["spend_micro"] == view["settled_micro"]
        assert platform["requests"] == view["requests"] >= 100
        assert platform["budget_limit_micro"] == view["limit_micro"]
        assert platform["budget_state"] == view["state"]
        assert platform["input_tokens"] > 0 and platform["cached_input_tokens"] > 0

        argv = [duckdb_cli(), "-csv", "-noheader"]
        for statement in views_preamble(archive, "Asia/Kolkata"):
            argv += ["-c", statement]
        sql = (f"SELECT settled_micro, requests FROM scope_balances "
               f"WHERE scope = 'team:platform' AND balance_period = '{month}'")
        cli = subprocess.run([*argv, "-c", f".read {VIEWS_SQL}", "-c", sql], capture_output=True, text=True)
        assert cli.returncode == 0, cli.stderr
        assert cli.stdout.split() == [f"{view['settled_micro']},{view['requests']}"]
