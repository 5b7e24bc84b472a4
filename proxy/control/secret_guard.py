"""What the admin API may change of a deployment's provider key: nothing that moves it.

Where a provider key is sent is decided by the reviewed config path only (the config file on the host and
``farebox config apply``): over HTTP an existing deployment keeps its ``api_key_env`` and ``base_url``, and
a new deployment may name only a secret the pod's config declares, for a host it is declared for
(``proxy.snapshot.secrets``). Pure: checks a spec, raises the control plane's errors.
"""

from __future__ import annotations

from typing import Any, Mapping

from proxy.control.errors import ConfigRejected, ReviewedPathOnly
from proxy.snapshot.secrets import SecretHosts

REVIEWED_FIELDS = ("api_key_env", "base_url")  # where a provider key goes: the reviewed config path only


def secret_guard(dep_id: str, old: Mapping[str, Any] | None, spec: dict[str, Any], secret_hosts: SecretHosts) -> None:
    """The admin API never moves a key: an existing deployment keeps its ``api_key_env`` and ``base_url``
    (absent in the body: kept as they are); a new one may name only a declared secret, for a declared host.
    ``spec`` is completed in place with the kept fields."""
    if old is not None:
        for name in REVIEWED_FIELDS:
            if name not in spec:
                if name in old:
                    spec[name] = old[name]
            elif spec[name] != old.get(name):
                raise ReviewedPathOnly(
                    f"deployments.{dep_id}.{name} changes only through the reviewed config path (the config file and "
                    "`farebox config apply`), never the admin API.", param=name)
        return
    ref = spec.get("api_key_env")
    if ref is not None and not isinstance(ref, str):
        raise ConfigRejected([f"deployments.{dep_id}.api_key_env: must be a variable name"], "deployment")
    reason = secret_hosts.problem(ref, str(spec.get("base_url") or ""))
    if reason is not None:
        raise ConfigRejected([f"deployments.{dep_id}.api_key_env: {reason}"], "deployment")
