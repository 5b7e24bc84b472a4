"""Settings: parsed once at start-up, frozen, every problem reported together.

One YAML file (``farebox.yaml``) holds the pod's own settings (``server``,
``event_log``, ``state_dir``, ``secrets_file``) and the declarative control
plane (teams, deployments, aliases, prices: see
``proxy/control/declarative.py``). Relative paths are relative to the file.
This is the only module that reads the environment.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any, Mapping

import yaml
from sqlalchemy.engine import make_url

from farebox.archive_settings import ArchiveSettings, archive_settings
from farebox.data_settings import (
    BatchSettings,
    BodyLogSettings,
    CacheSettings,
    CanarySettings,
    StoredResponsesSettings,
    batch_settings,
    body_log_settings,
    cache_settings,
    canary_settings,
    stored_responses_settings,
)
from farebox.distributed_settings import DistributedSettings, distributed_settings
from farebox.server_settings import IdempotencyStoreSettings, idempotency_store_settings, overload_settings
from farebox.settings_observe import OBSERVABILITY_SECTIONS, ObservabilitySettings, parse_observability
from pricing.errors import PricingError
from proxy.control.declarative import CONTROL_SECTIONS, compile_snapshot
from proxy.control.problems import ConfigError, Problems, Reader
from proxy.overload import OverloadSettings
from proxy.snapshot import Snapshot
from proxy.snapshot.secrets import SecretHosts

SETTINGS_SECTIONS = ("server", "event_log", "state_dir", "secrets_file", "provider_secrets", "control_db", "mode",
                     "distributed",
                     "archive", "reconcile", *OBSERVABILITY_SECTIONS)
EXPORT_SOURCES = ("simulator", "openai", "anthropic", "aws", "google", "azure")  # who serves an account's export


@dataclass(frozen=True)
class ExportSource:
    """Where ``farebox reconcile`` reads one provider account's usage export; the key is a secret's name."""

    source: str  # one of EXPORT_SOURCES
    admin_key_env: str | None = None  # required for openai / anthropic
    base_url: str | None = None  # None: the provider's own API (simulator: the deployment's host)
    path: str | None = None  # aws (invocation logs), google, azure: the export's local copy
    cur_path: str | None = None  # aws: the CUR 2.0 export's local copy
    models: Mapping[str, str] = field(default_factory=dict)  # file sources: billing name -> our model id


@dataclass(frozen=True)
class ReconcileSettings:
    """``reconcile``: the drift threshold (percent, > 0) and per-account export sources.

    An account not listed whose deployments' provider starts with ``sim`` reads the simulator it is served by."""

    drift_threshold_pct: Decimal = Decimal(1)
    accounts: Mapping[str, ExportSource] = field(default_factory=dict)


@dataclass(frozen=True)
class Settings:
    config_path: Path
    host: str
    port: int
    max_body_bytes: int
    pod_id: str
    hold_ttl_s: int
    sweep_interval_s: float
    max_in_flight: int  # model requests in flight; above it a fast 503 (0: no cap)
    overload: OverloadSettings  # admission at the measured capacity; past it a fast 503 (``server.overload``)
    auth_failures_per_minute: int  # failed authentications per source address before 429s (0: no throttling)
    metrics_token: str | None = field(repr=False)  # the bearer token GET /metrics asks for (None: open)
    drain_timeout_s: float  # SIGTERM: how long open streams may finish
    event_log_path: Path
    state_dir: Path
    secrets_file: Path | None
    snapshot: Snapshot  # the file's declared control config, compiled: validation and first-start seed
    control_tree: Mapping[str, Any] = field(default_factory=dict)  # the file's control sections, for config apply
    control_db_url: str = "sqlite://"
    idempotency_ttl_s: int = 86_400  # an Idempotency-Key's answer is replayed this long
    idempotency_max_answer_bytes: int = 1024 * 1024  # larger answers are not stored
    idempotency_store: IdempotencyStoreSettings = IdempotencyStoreSettings()  # embedded, --workers: disk or memory
    budget_wait_s: float = 20.0  # how long a request waits for in-flight holds to settle (x-fb-max-wait-ms: its own)
    budget_wait_max_s: float = 30.0  # the ceiling a caller's x-fb-max-wait-ms may ask for
    poll_interval_s: float = 0.2
    price_change_factor: Decimal = Decimal(2)
    approve_budgets_above_micro: int | None = None  # over the admin API a raise past this takes two people
    mode: str = "embedded"  # embedded | distributed
    distributed: DistributedSettings = field(default_factory=DistributedSettings)
    archive: ArchiveSettings = field(default_factory=ArchiveSettings)
    cache: CacheSettings = field(default_factory=CacheSettings)  # the exact response cache
    body_log: BodyLogSettings = field(default_factory=BodyLogSettings)  # opt-in encrypted bodies per team
    stored_responses: StoredResponsesSettings = field(default_factory=StoredResponsesSettings)  # Responses ``store``
    batches: BatchSettings = field(default_factory=BatchSettings)  # the Files and Batches API
    canary: CanarySettings = field(default_factory=CanarySettings)  # the synthetic canary
    # the provider secrets deployments may name, and the hosts each may be sent to (``proxy.snapshot.secrets``)
    secret_hosts: SecretHosts = field(default_factory=lambda: SecretHosts({}))

    @property
    def archive_root(self) -> Path:
        return self.archive.path or self.state_dir / "archive"
    reconcile: ReconcileSettings = field(default_factory=ReconcileSettings)
    observability: ObservabilitySettings = field(default_factory=ObservabilitySettings)  # logs, traces, alerts

    @property
    def safe_db_url(self) -> str:
        """The database URL with any password masked, for logs and messages."""
        try:
            return make_url(self.control_db_url).render_as_string(hide_password=True)
        except Exception:  # noqa: BLE001 - never let a bad URL leak through an error
            return "<config database>"

    def with_listen(self, host: str | None, port: int | None) -> "Settings":
        return replace(self, host=host or self.host, port=port if port is not None else self.port)


def read_yaml(path: Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([f"cannot read {path}: {exc.strerror}"], str(path)) from None
    try:
        tree = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise ConfigError([f"{where}not valid YAML ({getattr(exc, 'problem', exc)})"], str(path)) from None
    if not isinstance(tree, dict):
        raise ConfigError(["the file must be a YAML mapping at the top level"], str(path))
    return tree


def load_settings(path: str | Path, env: Mapping[str, str] | None = None) -> Settings:
    """Parse and validate the whole file; raises ConfigError listing every problem."""
    env = os.environ if env is None else env
    path = Path(path)
    tree = read_yaml(path)
    base = path.parent
    problems = Problems()
    root = Reader(tree, "", problems)
    server = root.child("server")
    host = server.str("host", "127.0.0.1")
    port = server.int("port", 8080, 0)
    max_body = server.int("max_body_bytes", 4 * 1024 * 1024, 1024)
    pod_id = server.str("pod_id", None) or env.get("FAREBOX_POD_ID") or f"{socket.gethostname()}-{os.getpid()}"
    hold_ttl = server.int("hold_ttl_s", 900, 1)
    sweep_interval = server.number("sweep_interval_s", 5.0, 0.05)
    max_in_flight = server.int("max_in_flight", 2000, 0)
    overload = overload_settings(server.child("overload"))
    drain_timeout = server.number("drain_timeout_s", 25.0, 0)
    idem_ttl = server.int("idempotency_ttl_s", 86_400, 1)
    idem_max = server.int("idempotency_max_answer_bytes", 1024 * 1024, 0)
    idem_store = idempotency_store_settings(server)
    auth_failures = server.int("auth_failures_per_minute", 30, 0)  # per source address; 0: no throttling
    metrics_token_env = server.str("metrics_token_env", None)  # GET /metrics needs this bearer token when set
    metrics_token = env.get(metrics_token_env) if metrics_token_env else None
    if metrics_token_env and not metrics_token:
        problems.add("server.metrics_token_env", f"{metrics_token_env} is not set in the environment")
    budget_wait = server.number("budget_wait_s", 20.0, 0)
    budget_wait_max = server.number("budget_wait_max_s", 30.0, 0)
    if budget_wait > budget_wait_max:
        problems.add("server.budget_wait_s", f"is {budget_wait:g}, above server.budget_wait_max_s ({budget_wait_max:g})")
    server.reject_unknown()
    elog = root.child("event_log")
    log_path = base / elog.str("path", "var/events.sqlite")
    elog.reject_unknown()
    state_dir = base / root.str("state_dir", "var")
    secrets_name = root.str("secrets_file", None)
    cdb = root.child("control_db")
    db_url = env.get("FAREBOX_CONTROL_DB") or cdb.str("url", None) or f"sqlite:///{(state_dir / 'control.sqlite').resolve()}"
    poll_s = cdb.number("poll_interval_s", 0.2, 0.01)
    factor = cdb.decimal("price_change_factor", Decimal(2))
    approve_above = cdb.decimal("approve_budgets_above", None)  # budget currency; a raise past it takes two people
    if approve_above is not None and (approve_above < 0 or approve_above * 1_000_000 % 1):
        problems.add("control_db.approve_budgets_above", "must be an amount >= 0 with at most 6 decimals")
        approve_above = None
    if factor is not None and factor <= 1:
        problems.add("control_db.price_change_factor", "must be > 1")
    cdb.reject_unknown()
    try:
        make_url(db_url)
    except Exception:  # noqa: BLE001 - the URL is not echoed: it may hold a password
        problems.add("control_db.url", "is not a valid database URL")
    mode = root.str("mode", "embedded", choices=("embedded", "distributed"))
    dist = distributed_settings(root.child("distributed"), env, base, problems)
    archive = archive_settings(root.child("archive"), base)
    reconcile = _reconcile_settings(root.child("reconcile"), problems)
    observability = parse_observability(root, env, problems)
    cache, body_log_section = cache_settings(root.child("cache")), root.child("body_log")
    stored = stored_responses_settings(root.child("stored_responses"), state_dir)
    batches = batch_settings(root.child("batches"), state_dir, db_url if mode == "distributed" else None)
    canary = canary_settings(root.child("canary"))
    declared = tree.get("provider_secrets") if isinstance(tree, dict) else None
    root.skip(*CONTROL_SECTIONS, "provider_secrets")
    root.reject_unknown()
    control_tree = {k: tree[k] for k in CONTROL_SECTIONS if k in tree}
    snapshot = compile_snapshot(control_tree, problems=problems)
    secret_hosts = SecretHosts({})
    if snapshot is not None:
        _check_pricing_now(snapshot, problems)
        secret_hosts = declared_secrets(declared, snapshot, problems)
    secrets_file = base / secrets_name if secrets_name else None
    if secrets_file is not None and not secrets_file.exists():
        problems.add("secrets_file", f"{secrets_file} does not exist")
    body_log = body_log_settings(body_log_section, state_dir, env, snapshot)
    problems.raise_if_any(str(path))
    assert snapshot is not None
    return Settings(
        config_path=path,
        host=host,
        port=port,
        max_body_bytes=max_body,
        pod_id=pod_id,
        hold_ttl_s=hold_ttl,
        sweep_interval_s=sweep_interval,
        max_in_flight=max_in_flight,
        overload=overload,
        auth_failures_per_minute=auth_failures,
        metrics_token=metrics_token,
        drain_timeout_s=drain_timeout,
        idempotency_ttl_s=idem_ttl,
        idempotency_max_answer_bytes=idem_max,
        idempotency_store=idem_store,
        budget_wait_s=budget_wait,
        budget_wait_max_s=budget_wait_max,
        event_log_path=log_path,
        state_dir=state_dir,
        secrets_file=secrets_file,
        snapshot=snapshot,
        control_tree=control_tree,
        control_db_url=db_url,
        poll_interval_s=poll_s,
        price_change_factor=factor or Decimal(2),
        approve_budgets_above_micro=None if approve_above is None else int(approve_above * 1_000_000),
        mode=mode,
        distributed=dist,
        archive=archive,
        reconcile=reconcile,
        observability=observability,
        cache=cache,
        body_log=body_log,
        stored_responses=stored,
        batches=batches,
        canary=canary,
        secret_hosts=secret_hosts,
    )


def declared_secrets(declared: Any, snapshot: Snapshot, problems: Problems) -> SecretHosts:
    """``provider_secrets`` (name -> host patterns), or when absent what the file's deployments use; every
    deployment of the file must name a declared secret for its own host."""
    if declared is None:
        return SecretHosts.derived((d.secret_ref, d.base_url) for d in snapshot.deployments.values() if d.secret_ref)
    hosts: dict[str, tuple[str, ...]] = {}
    if not isinstance(declared, dict):
        problems.add("provider_secrets", "must map each secret's variable name to the hosts it may be sent to")
        return SecretHosts({})
    for name, patterns in declared.items():
        if isinstance(patterns, str):
            patterns = [patterns]
        if not isinstance(name, str) or not name or not isinstance(patterns, list) or not patterns or not all(
                isinstance(p, str) and p.strip() for p in patterns):
            problems.add(f"provider_secrets.{name}", "must be a non-empty list of hosts (host, host:port or *.domain)")
            continue
        hosts[name] = tuple(p.strip() for p in patterns)
    secret_hosts = SecretHosts(hosts)
    for dep in snapshot.deployments.values():
        reason = secret_hosts.problem(dep.secret_ref, dep.base_url)
        if reason is not None:
            problems.add(f"deployments.{dep.id}.api_key_env", reason)
    return secret_hosts


def _reconcile_settings(r: Reader, problems: Problems) -> ReconcileSettings:
    threshold = r.decimal("drift_threshold_pct", Decimal(1))
    if threshold is not None and threshold <= 0:
        problems.add(r.at("drift_threshold_pct"), "must be > 0")
    accounts = {}
    acc = r.child("accounts")
    for name in acc.data:
        a = acc.child(name)
        source = a.str("source", choices=EXPORT_SOURCES)
        key_env = a.str("admin_key_env", None)
        if source in ("openai", "anthropic") and key_env is None:
            problems.add(a.at("admin_key_env"), f"is required for a {source} export (the admin key's name)")
        path, cur_path = a.str("path", None), a.str("cur_path", None)
        if source in ("google", "azure") and path is None:
            problems.add(a.at("path"), f"is required for a {source} export (the folder or file of its local copy)")
        if source == "aws" and path is None and cur_path is None:
            problems.add(a.at("path"), "an aws export needs path (Bedrock invocation logs), cur_path (CUR 2.0) or both")
        raw_models = a.child("models").data or {}
        if not isinstance(raw_models, dict) or not all(isinstance(k, str) and isinstance(v, str) and v
                                                       for k, v in raw_models.items()):
            problems.add(a.at("models"), "must map billing names to model ids (strings)")
            raw_models = {}
        accounts[str(name)] = ExportSource(source or "simulator", key_env, a.str("base_url", None), path, cur_path,
                                           dict(raw_models))
        a.reject_unknown()
    r.reject_unknown()
    return ReconcileSettings(threshold or Decimal(1), accounts)


def _check_pricing_now(snapshot: Snapshot, problems: Problems) -> None:
    """Every deployment must be priceable today, or its requests would be refused."""
    now = datetime.now(timezone.utc)
    try:
        version = snapshot.price_book.in_force(now)
    except PricingError as exc:
        problems.add("prices", str(exc))
        return
    for dep_id in snapshot.deployments:
        try:
            price = version.price(dep_id)
            snapshot.fx.rate(price.currency, snapshot.currency, now)
        except PricingError as exc:
            problems.add(f"deployments.{dep_id}", f"cannot be priced now: {exc}")
