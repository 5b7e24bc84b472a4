"""Settings for what the gateway keeps of requests: the response cache and the encrypted body log.

``cache:`` (both modes; distributed pods share Redis at ``distributed.redis_url``)::

    cache: {max_entries: 10000, max_bytes: 268435456, ttl_s: 3600, max_temperature: 1.0,
            max_entry_bytes: 1048576,
            semantic: {max_entries: 10000, max_bytes: 67108864, max_per_namespace: 256}}

``cache.semantic`` bounds the semantic store (aliases opt in with
``cache.semantic``, each with its own threshold and TTL): ``max_entries`` and
``max_bytes`` the in-process store of an embedded pod, ``max_per_namespace``
what one lookup scans, in both modes.

``body_log:`` (teams opt in with ``body_log: true``)::

    body_log: {url: sqlite:///var/bodies.sqlite, retention_days: 30, sweep_interval_s: 3600,
               key_env: FAREBOX_BODY_LOG_KEY}

``stored_responses:`` (the Responses API's ``store``; distributed pods keep them in Redis at
``distributed.redis_url``, embedded and ``--workers`` pods in their own database, SQLite by default)::

    stored_responses: {url: sqlite:///var/responses.sqlite, ttl_s: 2592000, max_record_bytes: 8388608}

``batches:`` (the Files and Batches API; its own database, SQLite under ``state_dir`` by default; distributed
pods whose config database is PostgreSQL default to its URL, so every pod sees every batch: give it a database
of its own by URL to keep batch content out of config backups)::

    batches: {url: sqlite:///var/batches.sqlite, max_file_bytes: 209715200, max_lines: 50000, concurrency: 2,
              claim_s: 60, reserve_pct: 20, cpu_ceiling: 0.3, cpu_ceiling_beside: 0.12, provider_poll_s: 30}

``concurrency`` is how many batch lines each gateway process runs at once; ``claim_s`` how long a process
holds a line it took without renewing it (it renews every third of that while the line runs): a process killed
mid-line has its lines taken again by another, or by itself restarted, within ``claim_s``. ``reserve_pct`` is the
share of each deployment's provider-limit mirrors that batch requests leave for interactive ones
(``proxy.admission.priority``); ``cpu_ceiling`` the share of one core past which a gateway process takes no
batch line (its door answers the runner "busy": interactive requests keep the rest of the core), and
``cpu_ceiling_beside`` that share while interactive requests come (one in the last second): a batch beside
interactive traffic takes what is left below it, and the rest of ``cpu_ceiling`` once the traffic stops.
``provider_poll_s``: how often a batch sent to a provider's batch API is asked about.

``canary:`` (the synthetic canary, ``proxy.batches.canary``: a tiny request to every deployment, paid by
``team``, off by default)::

    canary: {enabled: false, interval_s: 60, timeout_s: 10, team: platform}

The body log's master key is read here, once, from the environment variable
``key_env`` names (urlsafe base64 of at least 32 random bytes, e.g. what
``Fernet.generate_key()`` prints). Without it there is no body log; a team
that opts in while the key is missing is a configuration problem.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from proxy.control.problems import Reader
from proxy.snapshot import Snapshot

MIN_KEY_BYTES = 32


@dataclass(frozen=True)
class CacheSettings:
    max_entries: int = 10_000  # in-process LRU bound (embedded mode)
    max_bytes: int = 256 * 1024 * 1024  # ... and its bytes bound
    ttl_s: int = 3600  # how long an entry is served
    max_temperature: float = 1.0  # above it a request is never cached (absent temperature = 1.0)
    max_entry_bytes: int = 1024 * 1024  # larger answers are not stored
    semantic_max_entries: int = 10_000  # the in-process semantic store's bounds (embedded mode) ...
    semantic_max_bytes: int = 64 * 1024 * 1024  # ... answers plus 4 bytes per vector component
    semantic_max_per_namespace: int = 256  # entries one lookup scans (both modes; pure Python: see docs/budgets.md)


@dataclass(frozen=True)
class BodyLogSettings:
    url: str = ""  # its own database; default sqlite under state_dir
    retention_days: int = 30
    sweep_interval_s: float = 3600.0
    key_env: str = "FAREBOX_BODY_LOG_KEY"
    master_key: bytes | None = None  # from the environment; None: no body log

    def __repr__(self) -> str:  # the key never reaches a log line or an error
        return (f"BodyLogSettings(url={self.url!r}, retention_days={self.retention_days}, "
                f"key_env={self.key_env!r}, key={'set' if self.master_key else 'unset'})")


@dataclass(frozen=True)
class StoredResponsesSettings:
    url: str = ""  # embedded and --workers: its own database; default sqlite under state_dir
    ttl_s: int = 30 * 86_400  # how long a stored response can be read and continued
    max_record_bytes: int = 8 * 1024 * 1024  # a larger response and its context is answered, not kept


@dataclass(frozen=True)
class BatchSettings:
    url: str = ""  # default: sqlite under state_dir (distributed: the config database)
    max_file_bytes: int = 200 * 1024 * 1024  # an uploaded file (OpenAI's limit)
    max_lines: int = 50_000  # requests in one batch (OpenAI's limit)
    concurrency: int = 2  # lines each gateway process runs at once
    claim_s: int = 60  # how long a claim lasts unrenewed (a killed process's lines are free again after it)
    reserve_pct: int = 20  # of each provider-limit mirror that batch requests leave to interactive ones
    cpu_ceiling: float = 0.3  # a gateway process busier than this share of a core takes no batch line ...
    cpu_ceiling_beside: float = 0.12  # ... or than this share while interactive requests come (the last second)
    provider_poll_s: float = 30.0  # how often a batch sent to a provider's batch API is asked about


def batch_settings(r: Reader, state_dir: Path, shared_url: str | None) -> BatchSettings:
    d = BatchSettings()
    out = BatchSettings(
        url=r.str("url", None) or (shared_url if shared_url and not shared_url.startswith("sqlite") else None)
        or f"sqlite:///{(state_dir / 'batches.sqlite').resolve()}",
        max_file_bytes=r.int("max_file_bytes", d.max_file_bytes, 1024), max_lines=r.int("max_lines", d.max_lines, 1),
        concurrency=r.int("concurrency", d.concurrency, 1), claim_s=r.int("claim_s", d.claim_s, 3),
        reserve_pct=r.int("reserve_pct", d.reserve_pct, 0), cpu_ceiling=r.number("cpu_ceiling", d.cpu_ceiling, 0.05),
        provider_poll_s=r.number("provider_poll_s", d.provider_poll_s, 0.05),
        cpu_ceiling_beside=r.number("cpu_ceiling_beside", d.cpu_ceiling_beside, 0.01))
    if out.cpu_ceiling_beside > out.cpu_ceiling:
        r.problems.add(r.at("cpu_ceiling_beside"), f"is {out.cpu_ceiling_beside:g}; at most cpu_ceiling "
                                                   f"({out.cpu_ceiling:g}): batch work takes less beside interactive")
    if out.reserve_pct > 90:
        r.problems.add(r.at("reserve_pct"), f"is {out.reserve_pct}; at most 90 (batch work needs some capacity)")
    r.reject_unknown()
    return out


@dataclass(frozen=True)
class CanarySettings:
    enabled: bool = False  # off by default (``make run`` too): it spends the platform team's money
    interval_s: float = 60.0  # each deployment probed this often, by each gateway process
    timeout_s: float = 10.0  # no answer by then: down
    team: str = "platform"  # who pays for the probes (a team of the config)


def canary_settings(r: Reader) -> CanarySettings:
    d = CanarySettings()
    out = CanarySettings(enabled=r.bool("enabled", d.enabled), interval_s=r.number("interval_s", d.interval_s, 0.2),
                         timeout_s=r.number("timeout_s", d.timeout_s, 0.1), team=r.str("team", d.team) or d.team)
    r.reject_unknown()
    return out


def stored_responses_settings(r: Reader, state_dir: Path) -> StoredResponsesSettings:
    d = StoredResponsesSettings()
    out = StoredResponsesSettings(
        url=r.str("url", None) or f"sqlite:///{(state_dir / 'responses.sqlite').resolve()}",
        ttl_s=r.int("ttl_s", d.ttl_s, 60), max_record_bytes=r.int("max_record_bytes", d.max_record_bytes, 1024))
    r.reject_unknown()
    return out


def cache_settings(r: Reader) -> CacheSettings:
    d = CacheSettings()
    out = CacheSettings(
        max_entries=r.int("max_entries", d.max_entries, 1),
        max_bytes=r.int("max_bytes", d.max_bytes, 1024),
        ttl_s=r.int("ttl_s", d.ttl_s, 1),
        max_temperature=r.number("max_temperature", d.max_temperature, 0),
        max_entry_bytes=r.int("max_entry_bytes", d.max_entry_bytes, 1),
        semantic_max_entries=(sem := r.child("semantic")).int("max_entries", d.semantic_max_entries, 1),
        semantic_max_bytes=sem.int("max_bytes", d.semantic_max_bytes, 1024),
        semantic_max_per_namespace=sem.int("max_per_namespace", d.semantic_max_per_namespace, 1),
    )
    sem.reject_unknown()
    r.reject_unknown()
    return out


def body_log_settings(r: Reader, state_dir: Path, env: Mapping[str, str], snapshot: Snapshot | None) -> BodyLogSettings:
    d = BodyLogSettings()
    key_env = r.str("key_env", d.key_env) or d.key_env
    url = r.str("url", None) or f"sqlite:///{(state_dir / 'bodies.sqlite').resolve()}"
    out = BodyLogSettings(url=url, retention_days=r.int("retention_days", d.retention_days, 1),
                          sweep_interval_s=r.number("sweep_interval_s", d.sweep_interval_s, 1),
                          key_env=key_env, master_key=None)
    r.reject_unknown()
    raw = env.get(key_env)
    key = None
    if raw:
        try:
            key = base64.urlsafe_b64decode(raw.strip().encode())
        except (binascii.Error, ValueError):
            key = None
        if key is None or len(key) < MIN_KEY_BYTES:
            r.problems.add(r.at("key_env"), f"{key_env} must be urlsafe base64 of at least {MIN_KEY_BYTES} bytes")
            key = None
    opted = sorted(t.name for t in snapshot.teams.values() if t.body_log) if snapshot is not None else []
    if opted and key is None and raw is None:
        r.problems.add(r.at("key_env"), f"teams {opted} opt into body logging but {key_env} is not set")
    return BodyLogSettings(out.url, out.retention_days, out.sweep_interval_s, out.key_env, key)
