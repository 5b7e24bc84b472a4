"""Provider secrets by declaration: which variables a deployment may name, and the hosts each may be sent to.

The declarations come from the reviewed config file on the host (``provider_secrets:`` in farebox.yaml, or,
when that section is absent, what the file's own deployments use: each ``api_key_env`` for the hosts of the
``base_url``s that name it). Nothing that arrives over the admin API can add to them. Invariants:

* a secret's value is read from the environment or the secrets file only if its name is declared;
* a secret is attached to an upstream request only when the request's host is one it was declared for
  (``SecretHosts.check``), whatever the snapshot says, so a deployment changed to point elsewhere gets no key;
* the value never appears in a message, a ``repr``, an event or a log line: only names and hosts do.

A host pattern is ``host`` (any port), ``host:port``, or ``*.suffix`` (any subdomain of ``suffix``, any port).

Pure: no I/O.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit


class SecretNotDeclared(ValueError):
    """A deployment names a secret that is not declared, or sends it to a host it was not declared for."""


@functools.lru_cache(maxsize=1024)
def host_of(url: str) -> tuple[str, int | None]:
    """(lower-case host, port or None) of a URL; ("", None) when it has none. Kept per URL: every attempt checks
    its deployment's ``base_url`` (a config value) before a key may go to it."""
    try:
        parts = urlsplit(url)
        return (parts.hostname or "").lower(), parts.port
    except ValueError:
        return "", None


def host_matches(pattern: str, host: str, port: int | None) -> bool:
    pattern = pattern.strip().lower()
    if pattern.startswith("*."):
        suffix = pattern[1:]
        return host.endswith(suffix) and len(host) > len(suffix)
    name, sep, want_port = pattern.rpartition(":") if pattern.count(":") == 1 else (pattern, "", "")
    if not sep:
        return host == pattern
    return host == name and want_port.isdigit() and port == int(want_port)


def host_pattern(url: str) -> str:
    """The exact ``host:port`` (or ``host``) pattern of a URL, as derived declarations use."""
    host, port = host_of(url)
    return f"{host}:{port}" if port is not None else host


@dataclass(frozen=True, slots=True)
class SecretHosts:
    """Declared provider secrets: name -> host patterns it may be sent to."""

    hosts: Mapping[str, tuple[str, ...]]

    @classmethod
    def derived(cls, uses: Iterable[tuple[str, str]]) -> "SecretHosts":
        """From (secret name, base_url) pairs: each name declared for exactly the hosts that use it."""
        out: dict[str, list[str]] = {}
        for name, url in uses:
            pattern = host_pattern(url)
            if pattern and pattern not in out.setdefault(name, []):
                out[name].append(pattern)
        return cls({name: tuple(patterns) for name, patterns in out.items()})

    def declared(self, name: str) -> bool:
        return name in self.hosts

    def problem(self, name: str | None, url: str) -> str | None:
        """Why a deployment naming secret ``name`` with ``url`` may not have it; None when it may."""
        if name is None:
            return None
        if name not in self.hosts:
            return (f"{name} is not a declared provider secret (declared: {sorted(self.hosts) or 'none'}); "
                    "declare it under provider_secrets in the config file")
        host, port = host_of(url)
        if not host:
            return f"base_url {url!r} has no host"
        if not any(host_matches(p, host, port) for p in self.hosts[name]):
            shown = f"{host}:{port}" if port is not None else host
            return f"{name} is declared for {list(self.hosts[name])}, not for {shown}"
        return None

    def check(self, name: str | None, url: str) -> None:
        """Raise ``SecretNotDeclared`` when ``problem`` has a reason."""
        reason = self.problem(name, url)
        if reason is not None:
            raise SecretNotDeclared(reason)
