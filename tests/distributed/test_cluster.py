"""Distributed mode end to end: real Kafka (Maven jars), real Redis, a Faust worker process, 3 gateway pods.

Never skipped: the broker and Redis fixtures fail when they cannot start.
``FB_DIST_REQUESTS`` scales the request count (default 300; the issue's
1,000 runs by setting it).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from datetime import date, timedelta

import httpx
import pytest
import redis

from infra.redis.server import RedisServer
from ledger.codec import decode
from streams.archive.read import read_archive
from tests.distributed.cluster import TEAMS, running_cluster, wait_until
from tests.harness import free_port, spawn, stop
from tests.infra.kafka.support import read_records, session_broker

pytestmark = pytest.mark.e2e

N = int(os.environ.get("FB_DIST_REQUESTS", "300"))


@pytest.fixture(scope="module")
def redis_server():
    server = RedisServer().start()
    yield server
    server.cleanup()


async def _fire(cluster, n: int) -> Counter:
    statuses: Counter = Counter()
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        async def one(i: int) -> None:
            team = TEAMS[i % 3]
            url = cluster.pod_urls[i % len(cluster.pod_urls)] + "/v1/chat/completions"
            body = {"model": "chat-default", "messages": [{"role": "user", "content": f"hello {i}"}],
                    "max_tokens": 40, "stream": True, "stream_options": {"include_usage": True}}
            headers = {"Authorization": f"Bearer {cluster.keys[team]}", "x-fb-tags": f"load=cluster,n={i}"}
            async with client.stream("POST", url, json=body, headers=headers) as resp:
                async for _ in resp.aiter_bytes():
                    pass
                statuses[(team, resp.status_code)] += 1

        await asyncio.gather(*(one(i) for i in range(n)))
    return statuses


def test_three_pods_one_worker_money_exact_and_replay_equals_live(tmp_path, redis_server, request):
    broker = session_broker()
    # alpha can afford only part of its traffic: refusals must come before its hard limit
    limits = {"alpha": "1.00", "beta": "100000.00", "gamma": "100000.00"}
    worker_metrics = free_port()
    with running_cluster(tmp_path, broker.bootstrap, redis_server.url, limits=limits,
                         lease={"lease_share": 4, "lease_last_pct": 5, "worker_metrics_port": worker_metrics},
                         sim_defaults={"ttft_ms": 20, "tokens_per_s": 2000, "output_tokens": 24}) as cluster:
        archiver = spawn(["farebox", "archiver", "--config", str(cluster.config)], tmp_path / "archiver.log")
        request.addfinalizer(lambda: stop(archiver))
        statuses = asyncio.run(_fire(cluster, N))  # archived as it goes, by the README recipe's own process
        _distributed_metrics(cluster, f"http://127.0.0.1:{worker_metrics}/metrics")
        for i, proc in enumerate(cluster.pods):  # graceful: leases returned, events flushed
            rc = stop(proc, timeout=40)
            assert rc == 0, f"pod-{i} exited {rc}:\n" + (cluster.folder / f"pod-{i}.log").read_text()[-4000:]
        cluster.pods = [None] * len(cluster.pods)  # type: ignore[list-item]
        rc = redis.Redis.from_url(redis_server.url)

        seen: list[dict] = []

        def settled_and_quiet():
            rows = {t: {k.decode(): v.decode() for k, v in rc.hgetall(f"fb:scope:team:{t}").items()} for t in TEAMS}
            seen[:] = [rows]
            quiet = all(r and r["held"] == "0" and r["leased"] == "0" for r in rows.values())
            return rows if quiet else False

        try:
            # the worker folds what the pods flushed; on a box loaded by the rest of the suite (CI once saw every
            # event in Kafka and the worker's rows still behind at 60 s) that takes far longer than alone
            rows = wait_until(settled_and_quiet, 150, what="all holds settled and all leases returned")
        except AssertionError as exc:  # say what the projection still shows, what reached Kafka, who said what
            raise AssertionError(f"{exc}\nlast rows: {seen}\n{_lease_story(cluster)}") from None

        records = asyncio.run(read_records(broker.bootstrap, cluster.requests_topic))
        events = [decode(value) for *_, value in records]
        ids = Counter(e.id for e in events)
        admitted = {e.request_id for e in events if e.type == "request.admitted"}
        settled = {e.request_id for e in events if e.type == "request.settled"}
        assert admitted and admitted == settled  # every admitted request settled; nothing leaked
        assert all(e.tags["load"] == "cluster" for e in events if e.type == "request.admitted")  # x-fb-tags carried
        archive = tmp_path / "archive"  # the default, <state_dir>/archive
        today = date.today()
        window = (today - timedelta(days=1), today + timedelta(days=1))
        wait_until(lambda: set(read_archive(archive, *window, columns=["id"]).column("id").to_pylist()) == set(ids),
                   60, what="the archiver caught up")
        assert stop(archiver, timeout=30) == 0  # SIGTERM: a clean stop
        table = read_archive(archive, *window, columns=["id", "event"])
        archived = Counter(table.column("id").to_pylist())
        assert set(archived) == set(ids) and max(archived.values()) == 1  # exactly once by id in the archive
        first = {}
        for e in events:
            first.setdefault(e.id, e)
        for team in TEAMS:
            cost = sum(e.cost_by_scope.get(f"team:{team}", 0) for e in first.values() if e.type == "request.settled")
            expired = sum(e.charged.get(f"team:{team}", 0) for e in first.values() if e.type == "hold.expired")
            row = rows[team]
            assert int(row["settled"]) == cost + expired, team  # balances = sum of settled
            assert int(row["settled"]) <= int(row["limit"]) + int(row["overrun"]), team  # never over the hard limit
        # Near its limit alpha's burst is refused with 429 (budget_exhausted or budget_reserved): pods batch their lease
        # requests, so no request waits out lease_wait_s (503 budget_unavailable) on a healthy cluster.
        refused = sum(n for (team, status), n in statuses.items() if status == 429)
        assert refused > 0 and all(status in (200, 429) for _, status in statuses), dict(statuses)
        assert all(status == 200 for (team, status) in statuses if team != "alpha")
        _budget_api_reads_the_projection(cluster, rows, tmp_path)
        out = os.popen(f"cd {os.getcwd()} && {os.sys.executable} -m farebox replay --config {cluster.config} "
                       f"--from {today - timedelta(days=1)} --to {today + timedelta(days=1)} --archive {archive}")
        report = out.read()
        assert out.close() is None, report  # exit 0: replay equals live
        assert "0 difference(s)" in report and "behind" not in report  # the archiver had caught up
        print(f"\n{N} requests: {dict(statuses)}; duplicates in Kafka: {sum(v - 1 for v in ids.values())}; "
              f"alpha settled {int(rows['alpha']['settled']) / 1e6:.2f} of {limits['alpha']}; {report.strip()}")


def _lease_story(cluster) -> str:  # type: ignore[no-untyped-def]
    """For a failure: each lease's events as the scope topic has them, and the pods' and worker's warnings."""
    records = asyncio.run(read_records(cluster.bootstrap, cluster.prefix + "scope-entries"))
    leases: dict[str, list[str]] = {}
    for partition, offset, _, _, value in records:
        body = json.loads(value)
        if body.get("type", "").startswith("lease."):
            leases.setdefault(body["lease_id"], []).append(
                f"{body['type']}@{partition}:{offset} {body.get('pod')} {body.get('amount_micro')}")
    unclosed = {lease: story for lease, story in leases.items()
                if not any(step.startswith(("lease.returned", "lease.expired")) for step in story)}
    lines = [f"{len(leases)} leases in {cluster.prefix}scope-entries, {len(unclosed)} neither returned nor expired:"]
    lines += [f"{lease}: {', '.join(story)}" for lease, story in sorted(unclosed.items())]
    worker = cluster.worker
    lines.append(f"worker process: {'running' if worker.poll() is None else f'exited {worker.returncode}'}; "
                 f"disk free under {cluster.folder}: {shutil.disk_usage(cluster.folder).free / 1e9:.1f} GB")
    for log in sorted(cluster.folder.glob("pod-*.log")) + [cluster.folder / "worker.log"]:
        said = [line for line in log.read_text().splitlines() if '"farebox.access"' not in line]
        lines += [f"--- {log.name} (without access lines):", *said[-40:]]
    return "\n".join(lines)


def _distributed_metrics(cluster, worker_url: str) -> None:  # type: ignore[no-untyped-def]
    """After the traffic: the pods' lease and spool families, and the worker's consumer lag per topic
    (it reaches 0 on both source topics once the worker has read everything)."""
    from prometheus_client.parser import text_string_to_metric_families

    def scrape(url: str) -> dict[tuple[str, tuple], float]:
        text = httpx.get(url, timeout=10).text
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for fam in text_string_to_metric_families(text) for s in fam.samples}

    pods = [scrape(url + "/metrics") for url in cluster.pod_urls]
    assert sum(p[("farebox_lease_grants_total", ())] for p in pods) > 0
    assert all(p[("farebox_spool_depth_bytes", ())] == 0 for p in pods)  # Kafka was up throughout
    # alpha near its limit takes top-ups, and a superseded lease is returned at once: returns happen, and a pod
    # never returns more leases than it was granted (a refused ask's empty lease is closed, not counted)
    assert all(0 <= p[("farebox_lease_returns_total", ())] <= p[("farebox_lease_grants_total", ())] for p in pods)
    assert sum(p[("farebox_lease_returns_total", ())] for p in pods) > 0
    spent = ("farebox_budget_spent_micro", (("scope", "team:alpha"),))  # from the worker's projection, every 5 s
    wait_until(lambda: scrape(cluster.pod_urls[0] + "/metrics").get(spent, 0) > 0, 20, what="alpha's spend on /metrics")
    assert pods[0][("farebox_budget_limit_micro", (("scope", "team:alpha"),))] == 1_000_000

    def caught_up():  # type: ignore[no-untyped-def]
        lag = {dict(k[1])["topic"]: v for k, v in scrape(worker_url).items() if k[0] == "farebox_consumer_lag_events"}
        return lag if set(lag) == {cluster.requests_topic, cluster.prefix + "scope-entries"} and not any(
            lag.values()) else False

    wait_until(caught_up, 60, what="the worker's consumer lag back to 0")


def _budget_api_reads_the_projection(cluster, rows: dict, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``GET /admin/v1/budgets/{scope}`` on a pod answers from the worker's projection, in embedded mode's shape."""
    made = subprocess.run([sys.executable, "-m", "farebox", "admin", "token", "create", "--config",
                           str(cluster.config), "--name", "finance", "--role", "finance", "--json"],
                          check=True, capture_output=True, text=True)
    token = json.loads(made.stdout)["token"]
    cluster.start_pod(0)  # reads the new token from the config database at start
    try:
        for team in TEAMS:
            resp = httpx.get(f"{cluster.pod_urls[0]}/admin/v1/budgets/team:{team}",
                             headers={"Authorization": f"Bearer {token}"}, timeout=10)
            assert resp.status_code == 200, resp.text
            view, row = resp.json(), rows[team]
            assert (view["settled_micro"], view["held_micro"], view["leased_micro"]) == (
                int(row["settled"]), int(row["held"]), int(row["leased"])), team
            assert view["remaining_micro"] == int(row["limit"]) - int(row["settled"]) - int(row["held"]) - int(
                row["leased"]), team
            assert view["period"] == row["period"] and view["requests"] == int(row["requests"]), team
            assert view["state"] == ("exhausted" if view["remaining_micro"] <= 0 else
                                     "soft" if row["state"] in ("soft", "hard") else "ok"), (team, view, row)
        # the usage API reads the archive the archiver wrote: each team's spend is its projected settled total
        month = date.fromisoformat(view["period"] + "-01")
        last = (month + timedelta(days=32)).replace(day=1) - timedelta(days=1)
        usage = httpx.get(f"{cluster.pod_urls[0]}/admin/v1/usage?from={month}&to={last}&by=team",
                          headers={"Authorization": f"Bearer {token}"}, timeout=30)
        assert usage.status_code == 200, usage.text
        spend = {r["team"]: r["spend_micro"] for r in usage.json()["data"]}
        assert spend == {team: rows[team]["settled"] for team in TEAMS}
    finally:
        assert stop(cluster.pods[0], timeout=40) == 0
        cluster.pods[0] = None
