"""The admin usage API and the FinOps page at /ui, end to end: one gateway stack, traffic through the openai SDK,
then the API against the budget ledger and the page, in headless Debian Chromium driven by Playwright, against
the API.

Chromium is Debian's (``infra/install-services.sh`` installs it; Playwright's own browser downloads are never
used). Screenshots are kept as artefacts in ``var/test-artefacts/finops/`` (each run replaces them; the path is
printed at the end of the run).
"""

from __future__ import annotations

import csv
import io
import shutil
import time
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Iterator
from zoneinfo import ZoneInfo

import httpx
import openai
import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.batch_lines import tagging_batch
from tests.harness import Stack, admin_token, mint, running_stack, wait_key_live

pytestmark = pytest.mark.e2e

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
MSG = [{"role": "user", "content": "how much did this cost?"}]
TZ = ZoneInfo("Asia/Kolkata")  # budgets.timezone in examples/farebox.yaml
BROWSER_TZ = "America/Los_Angeles"
SHOTS = Path(__file__).resolve().parents[2] / "var" / "test-artefacts" / "finops"  # kept after the run
A11Y = Path(__file__).with_name("finops_a11y.js")  # text contrast (WCAG AA) and controls without a name


class Env:
    def __init__(self, stack: Stack, admin: str, auditor: str, revoked: str, shots: Path, rollout_id: int) -> None:
        self.stack, self.admin, self.auditor, self.revoked, self.shots = stack, admin, auditor, revoked, shots
        self.rollout_id = rollout_id

    def get(self, path: str, token: str | None = None, **headers: str) -> httpx.Response:
        auth = {"Authorization": f"Bearer {token or self.auditor}"}
        return httpx.get(self.stack.gateway_url + path, headers={**auth, **headers}, timeout=30)


def _traffic(stack: Stack, key: str, n: int, aliases: tuple[str, ...]) -> None:
    with openai.OpenAI(base_url=stack.gateway_url + "/v1", api_key=key, max_retries=0) as client:
        for i in range(n):
            extra = {"x-sim-fault": "500"} if i % 7 == 6 else {}
            try:
                if i % 4 == 0:
                    for _ in client.chat.completions.create(
                            model=aliases[i % len(aliases)], messages=MSG, max_completion_tokens=30, stream=True,
                            stream_options={"include_usage": True}, extra_headers=extra):
                        pass
                else:
                    client.chat.completions.create(model=aliases[i % len(aliases)], messages=MSG,
                                                   max_completion_tokens=30, extra_headers=extra)
            except openai.APIError:
                pass


def with_split(tree: dict) -> None:
    tree["aliases"].append({"name": "chat-split", "kind": "chat", "deployments": ["sim-openai-mumbai"],
                            "split": {"key": "user", "variants": [{"name": "current", "alias": "chat-openai", "weight": 50},
                                                                  {"name": "candidate", "alias": "chat-anthropic",
                                                                   "weight": 50}]}})
    tree["aliases"] += [
        {"name": "chat-shadowed", "kind": "chat", "deployments": ["sim-openai-mumbai"],
         "shadow": {"alias": "chat-anthropic", "pct": 100, "team": "platform"}},
        {"name": "chat-ui-canary", "kind": "chat", "deployments": ["sim-openai-mumbai"]},
    ]


def _shadowed_and_a_rollout(stack: Stack, admin: str) -> int:
    """Four requests copied to chat-anthropic, and a config rollout running (its candidate a harmless change)."""
    with openai.OpenAI(base_url=stack.gateway_url + "/v1", api_key=stack.key, max_retries=0) as client:
        for i in range(4):
            client.chat.completions.create(model="chat-shadowed", messages=MSG, max_tokens=8, user=f"s{i}")
    auth = {"Authorization": f"Bearer {admin}"}
    armed = httpx.post(stack.gateway_url + "/admin/v1/rollouts", headers=auth, timeout=10,
                       json={"stages": [50, 100], "window_s": 3600}).json()
    assert httpx.put(stack.gateway_url + "/admin/v1/aliases/chat-ui-canary", headers=auth, timeout=10,
                     json={"kind": "chat", "deployments": ["sim-openai-mumbai"], "max_output_tokens": 512}
                     ).status_code == 200
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        listed = httpx.get(stack.gateway_url + "/admin/v1/rollouts", headers=auth, timeout=10).json()["data"]
        if listed[0]["state"] == "running":
            break
        time.sleep(0.2)
    return armed["id"]


def _split_traffic(stack: Stack, n: int) -> None:
    with openai.OpenAI(base_url=stack.gateway_url + "/v1", api_key=stack.key, max_retries=0) as client:
        for i in range(n):
            client.chat.completions.create(model="chat-split", user=f"user-{i}", messages=MSG, max_tokens=8)


def _a_batch(stack: Stack, n: int) -> None:
    """A finished batch of ``n`` lines for the page's batches table."""
    lines = tagging_batch(n)
    with openai.OpenAI(base_url=stack.gateway_url + "/v1", api_key=stack.key, max_retries=0) as client:
        uploaded = client.files.create(file=("b.jsonl", io.BytesIO(lines)), purpose="batch")
        batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                      completion_window="24h")
        deadline = time.monotonic() + 60
        while client.batches.retrieve(batch.id).status != "completed" and time.monotonic() < deadline:
            time.sleep(0.2)


def _create_token(stack: Stack, admin: str, second: str, name: str, role: str) -> str:
    """Minted over the admin API: one admin proposes, a second approves and receives the token."""
    resp = httpx.post(stack.gateway_url + "/admin/v1/admin-tokens", json={"name": name, "role": role},
                      headers={"Authorization": f"Bearer {admin}"})
    assert resp.status_code == 202, resp.text
    approved = httpx.post(stack.gateway_url + f"/admin/v1/changes/{resp.json()['id']}:approve",
                          headers={"Authorization": f"Bearer {second}"})
    assert approved.status_code == 200, approved.text
    return approved.json()["result"]["token"]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with running_stack(tmp_path_factory.mktemp("finops"), mutate=with_split,
                       aliases="chat-default,chat-openai,chat-anthropic,chat-split,chat-shadowed,chat-ui-canary,"
                               "embed-default") as stack:
        soon = (datetime.now(timezone.utc) + timedelta(days=3)).isoformat()
        kyc = mint(stack.config, "kyc-ops", "kyc-summariser", "chat-default,chat-openai", "--expires-at", soon)
        admin = admin_token(stack.config, "ops", "admin", live_at=stack.gateway_url)
        second = admin_token(stack.config, "ops-2", "admin", live_at=stack.gateway_url)
        auditor = _create_token(stack, admin, second, "auditor-1", "auditor")
        revoked = _create_token(stack, admin, second, "leaver", "finance")
        assert httpx.post(stack.gateway_url + "/admin/v1/admin-tokens/leaver:revoke",
                          headers={"Authorization": f"Bearer {admin}"}).status_code == 200
        for scope, limit in (("team:platform", "5.00"), ("team:kyc-ops", "0.25")):  # a burn-down to see; events
            assert httpx.put(stack.gateway_url + f"/admin/v1/budgets/{scope}", json={"monthly_limit": limit},
                             headers={"Authorization": f"Bearer {admin}"}).status_code == 200
        wait_key_live(stack.gateway_url, kyc)
        _traffic(stack, stack.key, 30, ("chat-default", "chat-openai", "chat-anthropic"))
        _traffic(stack, kyc, 8, ("chat-default", "chat-openai"))
        _a_batch(stack, 5)
        _split_traffic(stack, 12)
        rollout_id = _shadowed_and_a_rollout(stack, admin)
        shots = SHOTS
        shutil.rmtree(shots, ignore_errors=True)
        shots.mkdir(parents=True)
        yield Env(stack, admin, auditor, revoked, shots, rollout_id)
        print(f"\nFinOps page screenshots: {shots}")


def _settled_budget(env: Env) -> dict:
    """team:platform once nothing is held (every request settled)."""
    deadline = time.monotonic() + 15
    while True:
        view = env.get("/admin/v1/budgets/team:platform").json()
        if view["held_micro"] == 0 or time.monotonic() > deadline:
            return view
        time.sleep(0.1)


def _month_range(month: str) -> tuple[str, str]:
    start = date.fromisoformat(month + "-01")
    end = (start + timedelta(days=32)).replace(day=1) - timedelta(days=1)
    return start.isoformat(), end.isoformat()


def test_usage_for_platform_equals_the_budget_ledger(env: Env) -> None:
    view = _settled_budget(env)
    start, end = _month_range(view["period"])
    body = env.get(f"/admin/v1/usage?from={start}&to={end}&by=team").json()
    [platform] = [row for row in body["data"] if row["team"] == "platform"]
    assert platform["spend_micro"] == str(view["settled_micro"]) and view["settled_micro"] > 0
    assert platform["requests"] == view["requests"] >= 30
    assert body["currency"] == view["currency"] and body["timezone"] == "Asia/Kolkata" and body["by"] == ["team"]
    assert body["totals"]["spend_micro"] == str(sum(int(row["spend_micro"]) for row in body["data"]))
    assert platform["ttft_p50_ms"] is not None and platform["ttft_p50_ms"] <= platform["ttft_p95_ms"]
    assert platform["fallbacks"] <= platform["served"] <= platform["requests"]
    default = env.get("/admin/v1/usage").json()  # this budget month so far, by team
    assert default["from"] == start and default["by"] == ["team"]


def test_usage_as_csv_and_an_empty_range_is_its_header(env: Env) -> None:
    by_accept = env.get("/admin/v1/usage?by=team,app,alias", Accept="text/csv")
    by_format = env.get("/admin/v1/usage?by=team,app,alias&format=csv")
    assert by_accept.headers["content-type"].startswith("text/csv") and by_accept.text == by_format.text
    rows = list(csv.DictReader(io.StringIO(by_accept.text)))
    assert {(r["team"], r["app"]) for r in rows} >= {("platform", "playground"), ("kyc-ops", "kyc-summariser")}
    assert all(r["spend_micro"].isdigit() for r in rows)
    empty = env.get("/admin/v1/usage?from=2020-01-01&to=2020-01-31&by=team,day&format=csv")
    assert empty.status_code == 200
    assert empty.text.splitlines() == [empty.text.splitlines()[0]]
    assert empty.text.startswith("team,day,requests,") and "spend_micro" in empty.text


@pytest.mark.parametrize(("query", "param"), [
    ("by=team,weekday", "by"), ("group_by=", "group_by"), ("from=2026-13-01", "from"), ("to=yesterday", "to"),
    ("from=2026-12-10&to=2026-12-01", "to"), ("from=2020-01-01&to=2026-12-01", "from"), ("format=xml", "format"),
    ("colour=blue", "colour"),
])
def test_bad_usage_queries_name_the_field(env: Env, query: str, param: str) -> None:
    resp = env.get(f"/admin/v1/usage?{query}")
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error" and param in error["message"]


def test_usage_needs_an_admin_token(env: Env) -> None:
    assert env.get("/admin/v1/usage", token=env.stack.key).status_code == 401  # a virtual key
    assert env.get("/admin/v1/usage", token=env.revoked).status_code == 401


def test_the_door_of_the_answering_process(env: Env) -> None:
    """GET /admin/v1/load: the serving process's loop, admission rate and refusals; admin tokens only."""
    load = env.get("/admin/v1/load").json()
    assert load["object"] == "gateway.load" and load["limited"] is False and load["admission_limit_rps"] is None
    assert load["refused_total"] == 0 and load["admitted_total"] > 0 and 0 <= load["cpu_utilisation"] <= 1
    assert load["max_in_flight"] == 2000 and load["settings"]["target_utilisation"] == 0.8
    assert load["settings"]["enabled"] is False  # the suite's stacks do not shed (tests/harness.py)
    assert env.get("/admin/v1/load", token=env.stack.key).status_code == 401


def test_the_page_is_static_files_under_a_strict_policy(env: Env) -> None:
    page = httpx.get(env.stack.gateway_url + "/ui/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert httpx.get(env.stack.gateway_url + "/ui").headers["location"] == "/ui/"  # not followed by default
    assert httpx.get(env.stack.gateway_url + "/ui/app.js").headers["content-type"].startswith("text/javascript")
    missing = httpx.get(env.stack.gateway_url + "/ui/secrets.env")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "unknown_url"
    assert httpx.get(env.stack.gateway_url + "/uix").status_code == 401  # only /ui and below are open


# --- the page, in a real browser ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    # A browser far from the budgets' zone (Asia/Kolkata): its calendar date differs for 13.5 hours a day.
    context = browser.new_context(viewport={"width": 1366, "height": 900}, accept_downloads=True,
                                  timezone_id=BROWSER_TZ)
    yield context.new_page()
    context.close()


def _sign_in(page: Page, env: Env, token: str) -> None:
    page.goto(env.stack.gateway_url + "/ui")
    page.get_by_label("Admin token").fill(token)
    page.get_by_role("button", name="Sign in").click()


def _cell(page: Page, table: str, row: str, col: str):  # type: ignore[no-untyped-def]
    return page.locator(f'table[data-table="{table}"] tbody tr[data-key="{row}"] [data-col="{col}"]')


def test_page_shows_the_usage_apis_numbers_drills_down_and_downloads_csv(env: Env, page: Page) -> None:
    view = _settled_budget(env)
    month = view["period"]
    start, end = _month_range(month)
    api = {by: env.get(f"/admin/v1/usage?from={start}&to={end}&by={by}").json()
           for by in ("team", "team,app", "team,app,alias")}
    _sign_in(page, env, env.auditor)
    expect(page.locator("body")).to_have_attribute("data-loaded", month, timeout=20_000)
    page.screenshot(path=str(env.shots / "finops-page.png"), full_page=True)

    assert page.locator("#kpi-spend").get_attribute("data-micro") == api["team"]["totals"]["spend_micro"]
    assert page.locator("#kpi-ttft-p95").inner_text() == f'{api["team"]["totals"]["ttft_p95_ms"]} ms'
    assert page.locator("#door-state").inner_text() == "open"  # the door of the process that answered
    assert page.locator("#door-refused").inner_text() == "0"
    assert page.locator("#door-in-flight").inner_text().endswith("of 2000")
    split = env.get(f"/admin/v1/usage?from={start}&to={end}&by=alias,variant").json()["data"]
    for row in (r for r in split if r["variant"] is not None):  # the split's variants side by side
        cell = _cell(page, "variants", f'{row["alias"]} / {row["variant"]}', "requests")
        assert cell.inner_text() == str(row["requests"])
    assert sum(r["requests"] for r in split if r["variant"] is not None) == 12
    shadow = env.get(f"/admin/v1/usage?from={start}&to={end}&by=alias,shadow").json()["data"]
    legs = [r for r in shadow if r["shadow"] == "chat-shadowed"]
    own = [r for r in shadow if r["alias"] == "chat-shadowed" and r["shadow"] is None]
    assert [r["requests"] for r in own] == [4]
    for label, rows in (("chat-shadowed (served)", own), ("chat-anthropic (shadow of chat-shadowed)", legs)):
        assert _cell(page, "shadows", label, "requests").inner_text() == str(rows[0]["requests"])
    deployments = env.get("/admin/v1/deployments").json()["data"]
    for dep in deployments:  # the canary is off here: not probed; the status view lists every deployment
        assert _cell(page, "deployments", dep["id"], "status").inner_text() == "not probed"
    assert _cell(page, "rollouts", str(env.rollout_id), "state").inner_text() == "running"
    assert _cell(page, "rollouts", str(env.rollout_id), "pct").inner_text() == "50%"
    batches = env.get("/admin/v1/batches?team=platform").json()["data"]
    assert _cell(page, "batches", "platform", "lines_done").inner_text() == "5"  # the one batch, its five lines
    assert _cell(page, "batches", "platform", "cost_micro").get_attribute("data-micro") == str(
        sum(b["x_farebox"]["cost_micro"] for b in batches))
    saved = sum(b["x_farebox"]["saved_micro"] for b in batches)  # chat-openai asks the flex tier for batch work
    assert saved > 0 and _cell(page, "batches", "platform", "saved_micro").get_attribute("data-micro") == str(saved)
    for row in api["team"]["data"]:
        assert _cell(page, "teams-budget", row["team"], "spend_micro").get_attribute("data-micro") == row["spend_micro"]
    assert _cell(page, "teams-budget", "platform", "settled_micro").get_attribute("data-micro") == str(
        view["settled_micro"])
    assert page.locator("#burndown svg[role=img]").count() >= 1  # one burn-down per team with a budget
    # month-end forecast = spend so far / days so far x days in the month, days counted in the budgets' zone
    elapsed, days = datetime.now(TZ).day, int(end[8:10])
    for row in api["team"]["data"]:
        forecast = _cell(page, "teams-budget", row["team"], "forecast_micro").get_attribute("data-micro")
        assert forecast == str(int(row["spend_micro"]) * days // elapsed), (row["team"], elapsed)
    expect(page.locator('table[data-table="keys-near-expiry"] tbody tr')).to_have_count(1)  # the kyc-ops key
    _shows_the_other_panels(page, env, start, end, api["team"]["totals"])
    assert page.evaluate(A11Y.read_text()) == {"low": [], "unlabelled": []}  # contrast and labels
    # usable on a laptop screen (1366 wide): no table needs a horizontal scroll to show its columns
    assert page.evaluate("[...document.querySelectorAll('.table-wrap')].filter("
                         "w => w.scrollWidth > w.clientWidth).map(w => w.querySelector('table').dataset.table)") == []

    page.get_by_role("button", name="Show apps of team platform").click()
    [app] = [r for r in api["team,app"]["data"] if r["team"] == "platform" and r["app"] == "playground"]
    expect(page.locator('table[data-table="drill-apps"]')).to_be_visible()
    assert _cell(page, "drill-apps", "playground", "spend_micro").get_attribute("data-micro") == app["spend_micro"]
    page.get_by_role("button", name="Show aliases of app playground").click()
    aliases = [r for r in api["team,app,alias"]["data"] if r["team"] == "platform" and r["app"] == "playground"]
    expect(page.locator('table[data-table="drill-aliases"] tbody tr')).to_have_count(len(aliases))
    for row in aliases:
        assert _cell(page, "drill-aliases", row["alias"], "spend_micro").get_attribute("data-micro") == row[
            "spend_micro"]
    page.screenshot(path=str(env.shots / "finops-drill-down.png"), full_page=True)

    with page.expect_download() as download:
        page.locator('button[data-csv="drill-aliases"]').click()
    drilled = list(csv.DictReader(io.StringIO(Path(download.value.path()).read_text())))
    assert [(r["alias"], r["spend_micro"]) for r in drilled] == [(r["alias"], r["spend_micro"]) for r in
                                                                  sorted(aliases, key=lambda r: -int(r["spend_micro"]))]
    with page.expect_download() as download:
        page.locator('button[data-csv="top-aliases"]').click()
    assert Path(download.value.path()).read_text() == env.get(
        f"/admin/v1/usage?from={start}&to={end}&by=alias&format=csv").text

    page.get_by_label("Budget month", exact=True).fill("2020-01")  # a month with no traffic: empty tables, CSV headers alone
    page.get_by_role("button", name="Show").click()
    expect(page.locator("body")).to_have_attribute("data-loaded", "2020-01", timeout=20_000)
    expect(page.locator('table[data-table="top-aliases"] tbody tr')).to_have_count(0)
    with page.expect_download() as download:
        page.locator('button[data-csv="top-aliases"]').click()
    header = Path(download.value.path()).read_text()
    assert header.splitlines() == ["alias,requests,closed,served,spend_micro,corrected_micro,input_tokens,"
                                   "cached_input_tokens,cache_write_tokens,output_tokens,reasoning_tokens,fallbacks,hedge_micro,currency,ttft_p50_ms,"
                                   "ttft_p95_ms,latency_p50_ms,latency_p95_ms,cache_hits,cache_saved_micro"]


def _units(micro: int) -> str:
    """The page's money text (tables.js ``units``): two to six decimals, trailing zeros trimmed."""
    frac = f"{micro % 10**6:06d}".rstrip("0").ljust(2, "0")
    return f"{micro // 10**6:,}.{frac}"


def _shows_the_other_panels(page: Page, env: Env, start: str, end: str, totals: dict) -> None:
    """KPIs, top models, cost per request by day and the recent budget events, each against its API."""
    currency = env.get("/admin/v1/usage").json()["currency"]
    assert page.locator("#kpi-requests").inner_text() == f'{totals["requests"]:,}'
    fallback = page.locator("#kpi-fallback").inner_text()
    assert fallback == (f'{totals["fallbacks"] * 100 / totals["served"]:.1f}%' if totals["served"] else "—")
    assert page.locator("#kpi-cache").inner_text() == f'{_units(int(totals["cache_saved_micro"]))} {currency}'
    models = env.get(f"/admin/v1/usage?from={start}&to={end}&by=model").json()["data"]
    assert len(models) >= 2  # the openai and anthropic simulator models
    for row in models:
        assert _cell(page, "top-models", row["model"], "spend_micro").get_attribute("data-micro") == row["spend_micro"]
    days = env.get(f"/admin/v1/usage?from={start}&to={end}&by=day").json()["data"]
    assert page.locator("#cpr-chart svg[role=img]").count() == 1 and days
    for row in days:
        assert _cell(page, "usage-by-day", row["day"], "cost_per_request_micro").get_attribute("data-micro") == str(
            int(row["spend_micro"]) // row["requests"])
    events = env.get(f"/admin/v1/usage/budget-events?from={start}&to={end}&limit=50").json()["data"]
    assert any(e["scope"] == "team:kyc-ops" and e["type"] == "budget.threshold_crossed" for e in events)
    expect(page.locator('table[data-table="budget-events"] tbody tr')).to_have_count(len(events))
    expect(page.locator('table[data-table="budget-events"]')).to_contain_text("team:kyc-ops")


@pytest.mark.parametrize("who", ["wrong", "revoked", "virtual key"])
def test_a_bad_token_is_refused_with_a_401_message(env: Env, page: Page, who: str) -> None:
    token = {"wrong": "fbadm-not-a-token", "revoked": env.revoked, "virtual key": env.stack.key}[who]
    _sign_in(page, env, token)
    expect(page.get_by_role("alert")).to_contain_text("401")
    expect(page.locator("#dashboard")).to_be_hidden()
    if who == "wrong":
        page.screenshot(path=str(env.shots / "finops-login-refused.png"))
        assert page.evaluate(A11Y.read_text()) == {"low": [], "unlabelled": []}  # the sign-in form and its error
