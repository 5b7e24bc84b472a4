"""Provider secrets: which the config file declares, and reading their values from the environment or the
secrets file. With ``farebox.settings`` the only modules that read the environment.

Invariants: a variable is read only if it is declared (``provider_secrets:``, or what the file's own
deployments name); values live in the returned ``Secrets`` only, never in an error or a log line; a secrets
file others can read is a warning at start.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Iterable, Mapping

from farebox.settings import Settings
from proxy.control.problems import ConfigError
from proxy.snapshot import Secrets, Snapshot

log = logging.getLogger("farebox")


def resolve_secrets(settings: Settings, names: Iterable[str], env: Mapping[str, str] | None = None
                    ) -> tuple[dict[str, str], list[str]]:
    """(values found, names missing) for provider-key names, from the environment or the secrets file."""
    env = os.environ if env is None else env
    from_file = _read_env_file(settings.secrets_file) if settings.secrets_file else {}
    found, missing = {}, []
    for name in names:
        value = env.get(name) or from_file.get(name)
        if value:
            found[name] = value
        else:
            missing.append(name)
    return found, missing


def resolve_provider_secrets(settings: Settings, names: Iterable[str], env: Mapping[str, str] | None = None
                             ) -> tuple[dict[str, str], list[str]]:
    """``resolve_secrets`` for the provider keys a new snapshot names: an undeclared name is never read (a
    deployment published over the admin API cannot make the pod read, say, the body-log key)."""
    names = list(names)
    found, missing = resolve_secrets(settings, [n for n in names if settings.secret_hosts.declared(n)], env)
    return found, missing + [n for n in names if not settings.secret_hosts.declared(n)]


def load_secrets(settings: Settings, env: Mapping[str, str] | None = None, snapshot: Snapshot | None = None) -> Secrets:
    """Provider keys named by deployments, from the environment or the secrets file.

    The environment wins. A missing secret is a start-up error naming the
    variable, never its value.
    """
    env = os.environ if env is None else env
    if settings.secrets_file is not None:
        _warn_if_readable(settings.secrets_file)
    from_file = _read_env_file(settings.secrets_file) if settings.secrets_file else {}
    values: dict[str, str] = {}
    missing = []
    for dep in (snapshot or settings.snapshot).deployments.values():
        ref = dep.secret_ref
        if ref is None:
            continue
        if not settings.secret_hosts.declared(ref):  # never read a variable the config file did not declare
            log.error("deployment %s cannot be called: %s", dep.id,
                                               settings.secret_hosts.problem(ref, dep.base_url))
            continue
        value = env.get(ref) or from_file.get(ref)
        if not value:
            missing.append(f"deployments.{dep.id}.api_key_env: {ref} is not set in the environment or the secrets file")
        else:
            values[ref] = value
    if missing:
        raise ConfigError(missing, str(settings.config_path))
    return Secrets(values, settings.secret_hosts)


def _warn_if_readable(path: Path) -> None:
    """A provider-key file others can read is a warning at start (the keys are still used)."""
    try:
        mode = path.stat().st_mode & 0o777
    except OSError:
        return
    if mode & 0o077:
        log.warning(
            "secrets file %s is readable by group or others (mode %03o): chmod 600 it", path, mode)


def _read_env_file(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        name, _, value = line.partition("=")
        out[name.strip()] = value.strip().strip('"').strip("'")
    return out
