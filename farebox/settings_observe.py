"""The ``logging``, ``tracing`` and ``alerts`` sections of ``farebox.yaml``: parsed once, frozen.

``farebox.settings.load_settings`` calls ``parse_observability`` with its
problem list, so a bad value here is reported beside every other one. A
webhook URL must be an absolute http(s) URL; its signing secret is named by
an environment variable (read by ``load_settings``'s environment, never
written to a log or an error).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping
from urllib.parse import urlsplit

from proxy.control.problems import Problems, Reader

LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("json", "text")
OBSERVABILITY_SECTIONS = ("logging", "tracing", "alerts")


@dataclass(frozen=True)
class LoggingSettings:
    level: str = "info"  # the farebox loggers' level
    format: str = "json"  # json: one object per line; text: for a terminal
    access_log: bool = True  # one line per request on ``farebox.access`` (at info)


@dataclass(frozen=True)
class TracingSettings:
    enabled: bool = False  # off: no span is built and the request path pays one attribute check
    otlp_endpoint: str | None = None  # e.g. http://collector:4318/v1/traces; None with enabled: spans kept in memory
    service_name: str = "farebox"
    export_timeout_s: float = 2.0  # one OTLP export; in the exporter's thread, never the request's


@dataclass(frozen=True)
class AlertSettings:
    webhook_url: str | None = None  # None: no notifier
    webhook_secret: str | None = field(default=None, repr=False)  # HMAC key, from the env var named below
    webhook_secret_env: str | None = None
    timeout_s: float = 5.0
    retries: int = 4  # after the first try; backoff doubles from backoff_s
    backoff_s: float = 0.5
    key_expiry_days: int = 7  # warn a key's owners this long before it expires
    anomaly_factor: int = 3  # a minute's cost over this many times the trailing mean is an anomaly
    anomaly_min_micro: int = 1_000_000  # ... and over this much (no alerts on pennies)


@dataclass(frozen=True)
class ObservabilitySettings:
    logging: LoggingSettings = field(default_factory=LoggingSettings)
    tracing: TracingSettings = field(default_factory=TracingSettings)
    alerts: AlertSettings = field(default_factory=AlertSettings)


def _http_url(value: str | None, where: str, problems: Problems) -> str | None:
    if value is None:
        return None
    try:
        parts = urlsplit(value)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
        _ = parts.port  # raises on a port that is not a number
    except ValueError:
        ok = False
    if not ok:
        problems.add(where, "is not an absolute http(s) URL")  # the value is not echoed: it may hold a token
        return None
    return value


def parse_observability(root: Reader, env: Mapping[str, str], problems: Problems) -> ObservabilitySettings:
    lg = root.child("logging")
    dl = LoggingSettings()
    logging = LoggingSettings(level=lg.str("level", dl.level, choices=LOG_LEVELS) or dl.level,
                              format=lg.str("format", dl.format, choices=LOG_FORMATS) or dl.format,
                              access_log=lg.bool("access_log", dl.access_log))
    lg.reject_unknown()
    tr = root.child("tracing")
    dt = TracingSettings()
    tracing = TracingSettings(
        enabled=tr.bool("enabled", dt.enabled),
        otlp_endpoint=_http_url(env.get("FAREBOX_OTLP_ENDPOINT") or tr.str("otlp_endpoint", None),
                                tr.at("otlp_endpoint"), problems),
        service_name=tr.str("service_name", dt.service_name) or dt.service_name,
        export_timeout_s=tr.number("export_timeout_s", dt.export_timeout_s, 0.01),
    )
    tr.reject_unknown()
    al = root.child("alerts")
    da = AlertSettings()
    secret_env = al.str("webhook_secret_env", None)
    secret = env.get(secret_env) if secret_env else None
    url = _http_url(al.str("webhook_url", None), al.at("webhook_url"), problems)
    if secret_env and not secret:
        problems.add(al.at("webhook_secret_env"), f"{secret_env} is not set in the environment")
    alerts = AlertSettings(
        webhook_url=url, webhook_secret=secret, webhook_secret_env=secret_env,
        timeout_s=al.number("timeout_s", da.timeout_s, 0.01), retries=al.int("retries", da.retries, 0),
        backoff_s=al.number("backoff_s", da.backoff_s, 0), key_expiry_days=al.int("key_expiry_days",
                                                                                  da.key_expiry_days, 0),
        anomaly_factor=al.int("anomaly_factor", da.anomaly_factor, 1),
        anomaly_min_micro=al.int("anomaly_min_micro", da.anomaly_min_micro, 0),
    )
    al.reject_unknown()
    return ObservabilitySettings(logging, tracing, alerts)
