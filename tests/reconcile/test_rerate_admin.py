"""``POST /admin/v1/rerate`` against a running gateway: bad input, roles, dry run, apply once, audit.

Traffic at a typo'd price version 2 (the openai SDK), version 3 fixes it, the
archive catches up; then the admin API re-rates the day under version 3:
a dry run appends nothing, an apply appends the corrections through the pod's
log and its ledger's settled money moves by exactly the report's difference,
and a second apply appends nothing.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

import httpx
import openai
import pytest

from farebox.cli import main
from farebox.config_reader import read_snapshot
from farebox.settings import load_settings
from ledger.events import RatingCorrected
from tests.harness import read_events, running_stack
from tests.reconcile.rerate_fixtures import TYPO, price_spec
from tests.reconcile.test_price_typo import _archive

pytestmark = pytest.mark.e2e


def _publish(config, spec: str) -> None:
    assert main(["prices", "add", "--config", str(config), "--spec", spec, "--allow-large-change"]) == 0


def _token(config, name: str, role: str, gateway_url: str, capsys) -> str:  # noqa: ANN001
    """An admin token made in-process (no CLI start-up), returned once the gateway accepts it."""
    capsys.readouterr()
    assert main(["admin", "token", "create", "--config", str(config), "--name", name, "--role", role, "--json"]) == 0
    token = json.loads(capsys.readouterr().out)["token"]
    deadline = time.monotonic() + 20
    while httpx.get(gateway_url + "/admin/v1/snapshot", headers={"Authorization": f"Bearer {token}"}).status_code \
            == 401 and time.monotonic() < deadline:
        time.sleep(0.05)
    return token


def _error(resp: httpx.Response) -> tuple[int, str | None]:
    return resp.status_code, resp.json()["error"]["param"]


def test_admin_rerate_dry_run_then_apply_once_audited(tmp_path, capsys):
    with running_stack(tmp_path / "stack", aliases="chat-openai,chat-anthropic") as stack:
        settings = load_settings(stack.config)
        v1 = read_snapshot(settings).price_book.latest
        _publish(stack.config, price_spec(v1.prices, 10))  # version 2: the typo
        client = openai.OpenAI(base_url=stack.gateway_url + "/v1", api_key=stack.key, max_retries=0)
        versions: list[int] = []
        deadline = time.monotonic() + 15
        while versions.count(2) < 4 and time.monotonic() < deadline:
            for model in ("chat-openai", "chat-anthropic"):
                resp = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}],
                                                      extra_headers={"x-sim-output-tokens": "211"})
                versions.append(resp.model_extra["x_farebox"]["price_version"])
        assert versions.count(2) >= 4, versions
        _publish(stack.config, price_spec(v1.prices, 1))  # version 3: the fix
        time.sleep(0.5)  # the last settlements are appended after the response
        _archive(settings.state_dir, stack.events_path)

        finance = _token(stack.config, "fin", "finance", stack.gateway_url, capsys)
        auditor = _token(stack.config, "aud", "auditor", stack.gateway_url, capsys)
        day = datetime.now(timezone.utc).date().isoformat()
        with httpx.Client(base_url=stack.gateway_url, headers={"Authorization": f"Bearer {finance}"},
                          timeout=30) as http:
            post = lambda body, **kw: http.post("/admin/v1/rerate", json=body, **kw)  # noqa: E731
            window = {"from": day, "to": day}
            deadline = time.monotonic() + 10  # the pod learns of version 3 at its next config poll
            while post({**window, "price_version": 3}).status_code == 400 and time.monotonic() < deadline:
                time.sleep(0.1)
            before = len(read_events(stack.events_path))

            # bad input: a 400 naming the field, nothing appended
            assert _error(post({"to": day})) == (400, "from")
            assert _error(post({"from": "30/11/2026", "to": day})) == (400, "from")
            assert _error(post({"from": day, "to": "2000-01-01"})) == (400, "from")
            assert _error(post({**window, "price_version": 99})) == (400, "price_version")
            assert _error(post({**window, "price_version": "3"})) == (400, "price_version")
            assert _error(post({**window, "dry_run": "no"})) == (400, "dry_run")
            assert _error(post({**window, "colour": "red"})) == (400, "colour")
            assert _error(post({"from": "2001-01-01", "to": "2001-01-02"})) == (400, "from")  # no archive
            assert post(window, headers={"Authorization": f"Bearer {auditor}"}).status_code == 403
            assert len(read_events(stack.events_path)) == before

            dry = post({**window, "price_version": 3})
            assert dry.status_code == 200, dry.text
            report = dry.json()
            assert report["applied"] is False and report["corrections"] > 0 and report["diff_micro"] < 0
            assert any(row["deployment"] == TYPO and row["diff_micro"] < 0 for row in report["rows"])
            assert len(read_events(stack.events_path)) == before

            settled_before = http.get("/admin/v1/budgets/team:platform").json()["settled_micro"]
            applied = post({**window, "dry_run": False, "reason": "typo in v2"})  # the current book: version 3
            assert applied.status_code == 200, applied.text
            done = applied.json()
            assert done["applied"] is True and done["price_version"] == 3
            assert done["correction_ids"] == report["correction_ids"] and done["diff_micro"] == report["diff_micro"]
            events = read_events(stack.events_path)
            fixes = [e for e in events if isinstance(e, RatingCorrected)]
            assert sorted(f.id for f in fixes) == sorted(done["correction_ids"])
            assert len(events) == before + len(fixes)
            assert {f.reason for f in fixes} == {"typo in v2"}
            settled_after = http.get("/admin/v1/budgets/team:platform").json()["settled_micro"]
            assert settled_after - settled_before == done["diff_micro"]  # folded by the pod, to the micro-unit

            again = post({**window, "dry_run": False})  # the archive has not caught up: nothing twice
            assert again.status_code == 200 and again.json()["corrections"] == 0
            _archive(settings.state_dir, stack.events_path)
            assert post({**window, "dry_run": False}).json()["corrections"] == 0
            assert len(read_events(stack.events_path)) == len(events)
            assert http.get("/admin/v1/budgets/team:platform").json()["settled_micro"] == settled_after

            audit = http.get("/admin/v1/audit", params={"limit": 50},
                             headers={"Authorization": f"Bearer {auditor}"}).json()["data"]
            applies = [a for a in audit if a["action"] == "rerate.apply"]
            assert {a["outcome"] for a in applies} >= {"ok", "rejected", "denied"}
            first = next(a for a in reversed(applies) if a["outcome"] == "ok")
            assert first["actor"] == "fin" and first["after"]["corrections"] == len(fixes)
