"""The Grafana dashboard and the Prometheus alert rules reference only documented metrics (infra/monitoring)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "infra" / "monitoring"
NAME = re.compile(r"\bfarebox_[a-z_]+")
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ()}
REQUIRED_ALERTS = {"FareboxSoftBudgetCrossed", "FareboxCostPerMinuteAnomaly", "FareboxFallbackRateHigh",
                   "FareboxBreakerOpen", "FareboxArchiveLagging", "FareboxReconcileDrift"}


def _documented() -> dict[str, dict]:
    return {m["name"]: m for m in yaml.safe_load((MONITORING / "metrics.yaml").read_text())["metrics"]}


def _series_names() -> set[str]:
    """Every name a scrape can show: counters with _total, histograms with _bucket/_sum/_count."""
    names = set()
    for name, m in _documented().items():
        names |= {name + s for s in SUFFIXES[m["type"]]} | ({name} if m["type"] == "gauge" else set())
    return names


def _check_expr(expr: str, where: str) -> None:
    assert expr.strip(), f"{where}: empty expression"
    pairs = {")": "(", "]": "[", "}": "{"}
    stack: list[str] = []
    for ch in re.sub(r'"[^"]*"', "", expr):
        if ch in "([{":
            stack.append(ch)
        elif ch in pairs:
            assert stack and stack.pop() == pairs[ch], f"{where}: unbalanced {ch!r} in {expr!r}"
    assert not stack, f"{where}: unclosed {stack} in {expr!r}"
    used = set(NAME.findall(expr))
    assert used, f"{where}: references no farebox metric"
    unknown = used - _series_names()
    assert not unknown, f"{where}: metrics not in infra/monitoring/metrics.yaml: {sorted(unknown)}"


def test_metrics_said_to_exist_are_defined_where_the_list_says() -> None:
    for name, m in _documented().items():
        assert name.startswith("farebox_") and m["type"] in SUFFIXES and m["status"] in {"exists", "planned"}
        assert not {"key_id", "request_id", "key"} & set(m["labels"]), f"{name}: unbounded label"
        if m["status"] == "exists":
            assert f'"{name}"' in (ROOT / m["source"]).read_text(), f"{name} is not defined in {m['source']}"


def test_every_metric_exported_today_is_documented() -> None:
    from proxy.observe.metrics import Metrics

    exported = {family.name for family in Metrics().registry.collect()}
    assert exported and exported <= set(_documented()), sorted(exported - set(_documented()))


def test_alert_rules_cover_the_issue_and_reference_known_metrics() -> None:
    groups = yaml.safe_load((MONITORING / "alerts.yaml").read_text())["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    assert REQUIRED_ALERTS <= {r["alert"] for r in rules}
    for rule in rules:
        assert set(rule) >= {"alert", "expr", "for", "labels", "annotations"}, rule["alert"]
        assert rule["labels"]["severity"] in {"warning", "critical"}
        assert rule["annotations"]["summary"]
        assert re.fullmatch(r"\d+[smh]", rule["for"]), rule["for"]
        _check_expr(rule["expr"], rule["alert"])
    archive = next(r for r in rules if r["alert"] == "FareboxArchiveLagging")["expr"]
    assert "farebox_archive_lag_seconds" in archive and "farebox_archive_lag_events" in archive


def test_every_dashboard_panel_queries_known_metrics() -> None:
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    panels = dashboard["panels"]
    assert len(panels) >= 10 and len({p["id"] for p in panels}) == len(panels)
    for panel in panels:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            _check_expr(target["expr"], f"panel {panel['title']!r}")


def test_the_dashboard_shows_what_each_required_alert_fires_on() -> None:
    """Each alert the issue asks for can be followed on a panel: every metric its rule reads is on the dashboard."""
    rules = {r["alert"]: r for g in yaml.safe_load((MONITORING / "alerts.yaml").read_text())["groups"]
             for r in g["rules"]}
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    shown = {name for panel in dashboard["panels"] for t in panel["targets"] for name in NAME.findall(t["expr"])}
    for alert in sorted(REQUIRED_ALERTS):
        missing = set(NAME.findall(rules[alert]["expr"])) - shown
        assert not missing, f"{alert}: no dashboard panel reads {sorted(missing)}"
