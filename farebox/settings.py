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
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Mapping

import yaml

from pricing.errors import PricingError
from proxy.control import statefile
from proxy.control.declarative import CONTROL_SECTIONS, compile_snapshot
from proxy.control.problems import ConfigError, Problems, Reader
from proxy.control.snapshot import Secrets, Snapshot

SETTINGS_SECTIONS = ("server", "event_log", "state_dir", "secrets_file")


@dataclass(frozen=True)
class Settings:
    config_path: Path
    host: str
    port: int
    max_body_bytes: int
    pod_id: str
    hold_ttl_s: int
    sweep_interval_s: float
    event_log_path: Path
    state_dir: Path
    secrets_file: Path | None
    snapshot: Snapshot

    @property
    def keys_file(self) -> Path:
        return self.state_dir / statefile.KEYS

    @property
    def budgets_file(self) -> Path:
        return self.state_dir / statefile.BUDGETS

    @property
    def admin_tokens_file(self) -> Path:
        return self.state_dir / statefile.ADMIN_TOKENS

    @property
    def watched_files(self) -> tuple[Path, ...]:
        """What the config watcher re-reads on change."""
        return (self.config_path, self.keys_file, self.budgets_file, self.admin_tokens_file)

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
    server.reject_unknown()
    elog = root.child("event_log")
    log_path = base / elog.str("path", "var/events.sqlite")
    elog.reject_unknown()
    state_dir = base / root.str("state_dir", "var")
    secrets_name = root.str("secrets_file", None)
    root.skip(*CONTROL_SECTIONS)
    root.reject_unknown()
    stored = {n: _read_state(state_dir / n, problems) for n in (statefile.KEYS, statefile.BUDGETS, statefile.ADMIN_TOKENS)}
    snapshot = compile_snapshot(
        {k: tree[k] for k in CONTROL_SECTIONS if k in tree},
        stored[statefile.KEYS],
        stored[statefile.BUDGETS],
        stored[statefile.ADMIN_TOKENS],
        problems=problems,
    )
    if snapshot is not None:
        _check_pricing_now(snapshot, problems)
    secrets_file = base / secrets_name if secrets_name else None
    if secrets_file is not None and not secrets_file.exists():
        problems.add("secrets_file", f"{secrets_file} does not exist")
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
        event_log_path=log_path,
        state_dir=state_dir,
        secrets_file=secrets_file,
        snapshot=snapshot,
    )


def load_secrets(settings: Settings, env: Mapping[str, str] | None = None) -> Secrets:
    """Provider keys named by deployments, from the environment or the secrets file.

    The environment wins. A missing secret is a start-up error naming the
    variable, never its value.
    """
    env = os.environ if env is None else env
    from_file = _read_env_file(settings.secrets_file) if settings.secrets_file else {}
    values: dict[str, str] = {}
    missing = []
    for dep in settings.snapshot.deployments.values():
        ref = dep.secret_ref
        if ref is None:
            continue
        value = env.get(ref) or from_file.get(ref)
        if not value:
            missing.append(f"deployments.{dep.id}.api_key_env: {ref} is not set in the environment or the secrets file")
        else:
            values[ref] = value
    if missing:
        raise ConfigError(missing, str(settings.config_path))
    return Secrets(values)


def _read_env_file(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        name, _, value = line.partition("=")
        out[name.strip()] = value.strip().strip('"').strip("'")
    return out


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


def _read_state(path: Path, problems: Problems) -> list[dict]:
    try:
        return statefile.read_jsonl(path)
    except ValueError as exc:
        problems.add(path.name, str(exc))
        return []
