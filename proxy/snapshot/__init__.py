"""The immutable config snapshot the hot path reads.

A snapshot holds everything a request needs (keys by hash, aliases,
deployments, the versioned price book: a deployment's price is
looked up in the version in force, never stored on the deployment) and nothing secret: provider keys live in a separate
in-memory ``Secrets`` map, looked up by the deployment's ``secret_ref``.
Pods swap the whole snapshot with one reference change.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from decimal import Decimal
from functools import cached_property
from types import MappingProxyType
from typing import Mapping

from pricing.book import FxTable, PriceBook
from proxy.snapshot.privacy import PrivacyPolicy
from proxy.snapshot.secrets import SecretHosts

# "responses": an OpenAI-dialect deployment that serves POST /v1/responses itself (the Responses surface passes
# through to it instead of translating to chat).
CAPABILITIES = frozenset({"tools", "json_schema", "json_object", "vision", "streaming", "embeddings", "responses"})
DATA_CLASSES = ("public", "internal", "confidential", "restricted")
DIALECTS = frozenset({"openai", "anthropic", "azure_openai", "bedrock_converse", "gemini"})
# How each dialect may authenticate (the first is its default): ``key`` an API key from ``api_key_env``;
# ``entra`` a Microsoft Entra bearer token from ``api_key_env``; ``aws_sigv4`` requests signed by botocore
# (``api_key_env`` holding ``ACCESS_KEY_ID:SECRET[:SESSION_TOKEN]``, else ``aws_profile`` / botocore's chain);
# ``google_oauth`` a token from google-auth (``api_key_env`` holding a service-account JSON, else ADC).
AUTH_KINDS: Mapping[str, tuple[str, ...]] = {
    "openai": ("key",), "anthropic": ("key",), "azure_openai": ("key", "entra"),
    "bedrock_converse": ("aws_sigv4",), "gemini": ("key", "google_oauth"),
}
MAX_COST_CENTRE = 64  # characters of a team's or app's cost centre


@dataclass(frozen=True, slots=True)
class ProviderLimits:
    rpm: int | None = None
    input_tpm: int | None = None
    output_tpm: int | None = None
    # sequences a (self-hosted) fleet serves at once (vLLM's max-num-seqs): a slot per attempt, held until it ends
    concurrent_sequences: int | None = None


@dataclass(frozen=True, slots=True)
class BreakerPolicy:
    """When a deployment's circuit opens: > error_pct retryable errors over >= min_requests in window_s."""

    error_pct: int = 20
    min_requests: int = 50
    window_s: float = 30.0
    cooldown_s: float = 5.0  # first open; doubles on each failed probe up to max_cooldown_s
    max_cooldown_s: float = 120.0
    probes: int = 1  # half-open: concurrent probe requests let through
    close_after: int = 2  # consecutive probe successes that close the circuit


@dataclass(frozen=True, slots=True)
class Deployment:
    id: str
    dialect: str  # one of DIALECTS
    base_url: str  # e.g. http://127.0.0.1:9090/v1 (openai) or http://127.0.0.1:9090 (anthropic)
    provider: str
    account: str  # the provider billing account (FOCUS BillingAccountId)
    region: str
    model: str  # pinned provider model id
    context_window: int
    capabilities: frozenset[str]
    data_classes: tuple[str, ...]
    limits: ProviderLimits = ProviderLimits()
    weight: int = 1  # share of traffic; 0 is a standby, tried only after every weighted deployment
    secret_ref: str | None = None  # name of the provider key in Secrets, never the key
    forward_headers: tuple[str, ...] = ()  # request header prefixes passed upstream (e.g. "x-sim-")
    tokenizer: str | None = None  # exact encoding (o200k_base, cl100k_base); else guessed from the model id
    self_hosted: bool = False  # restricted data may only go to self-hosted deployments
    breaker: BreakerPolicy = BreakerPolicy()
    auth: str = "key"  # one of AUTH_KINDS[dialect]
    api_version: str | None = None  # Azure OpenAI's api-version (the deployment-name URL form)
    aws_profile: str | None = None  # Bedrock without api_key_env: this botocore profile (roles, SSO) signs
    project: str | None = None  # the sub-account under ``account`` it bills to (FOCUS SubAccountId)
    provisioned_team: str | None = None  # provisioned capacity: only this team's requests use it, before the rest


@dataclass(frozen=True, slots=True)
class SemanticCache:
    """A chat alias's semantic cache: its last user turn embedded through ``embeddings_alias``; a stored
    answer in the team's namespace whose vector's cosine similarity is at least ``threshold`` is served."""

    embeddings_alias: str  # an alias of kind embeddings; its calls are charged to the caller's team
    threshold: Decimal  # in (0, 1], at most 4 decimal places
    ttl_s: int = 86_400  # how long a stored answer is served


@dataclass(frozen=True, slots=True)
class Variant:
    """One side of a split: the alias that serves it, and its weight."""

    name: str
    alias: str
    weight: int


@dataclass(frozen=True, slots=True)
class Split:
    """An alias's traffic divided between variants by a stable hash of ``key`` (``proxy.routing.split``)."""

    key: str  # user | session | key
    variants: tuple[Variant, ...]


@dataclass(frozen=True, slots=True)
class Shadow:
    """A share of an alias's requests sent again, in the background, to a candidate alias, paid by ``team``."""

    alias: str
    pct: Decimal  # (0, 100]
    team: str
    app: str = "shadow"


@dataclass(frozen=True, slots=True)
class Alias:
    name: str
    kind: str  # "chat" | "embeddings"
    deployments: tuple[str, ...]  # deployment ids, in config order
    needs: frozenset[str] = frozenset()
    default_max_output_tokens: int = 1024
    max_output_tokens_cap: int = 16384
    connect_timeout_s: float = 5.0
    first_token_timeout_s: float = 30.0
    total_timeout_s: float = 600.0
    fallback_alias: str | None = None  # used only when the caller sends x-fb-allow-fallback: true
    idle_timeout_s: float = 20.0  # between chunks once a stream started
    # how long a request waits for provider capacity (every candidate's provider-limit mirror spent, a fleet
    # full) before it is refused 429 provider_capacity; 0: refused at once
    capacity_wait_s: float = 1.0
    heartbeat_s: float = 15.0  # SSE comment after this much silence (below load balancers' idle cut)
    max_attempts: int = 3
    retry_budget_pct: int = 10  # retries <= this share of the alias's requests over retry_window_s ...
    retry_budget_min: int = 10  # ... plus this many per window, so a quiet alias can still fail over
    retry_window_s: float = 10.0
    backoff_s: float = 0.05  # base of the jittered backoff before retrying a 5xx / timeout
    sticky: bool = True  # x-fb-session / user / long prompt prefix pick the same deployment
    hedge: bool = False  # opt-in: second attempt when the first has no token by its p95 TTFT
    hedge_after_s: float | None = None  # fixed hedge delay; None: the deployment's p95 TTFT
    cache: bool = False  # opt-in: exact response cache (a caller's x-fb-cache: on|off overrides)
    semantic: SemanticCache | None = None  # opt-in: semantic cache (chat aliases; x-fb-cache: off skips it)
    # a provider's content filter refusing the prompt (content_policy_violation) is final unless this is set:
    # then the next deployment (another provider's filter) is tried
    content_filter_failover: bool = False
    # batch-class requests to an OpenAI-dialect deployment ask for this service tier (``flex``: OpenAI's
    # batch-priced synchronous tier) when the caller named none; None: as sent
    batch_service_tier: str | None = None
    # how a batch of this alias's requests runs: ``gateway`` (its lines through the request path at batch
    # priority) or ``provider`` (sent whole to the first deployment with a batch API: OpenAI's Batch API,
    # Anthropic's Message Batches; ``proxy.batches.provider_run``)
    batch_via: str = "gateway"
    split: Split | None = None  # sticky variants: the request is served by one of these aliases instead
    shadow: Shadow | None = None  # a share of its requests also sent to a candidate, paid by the platform


@dataclass(frozen=True, slots=True)
class KeyLimits:
    """Per-key request and token rates per minute; None = not limited at this level."""

    rpm: int | None = None
    input_tpm: int | None = None
    output_tpm: int | None = None

    def over(self, default: "KeyLimits") -> "KeyLimits":
        """These limits, falling back to ``default`` field by field."""
        return KeyLimits(
            rpm=self.rpm if self.rpm is not None else default.rpm,
            input_tpm=self.input_tpm if self.input_tpm is not None else default.input_tpm,
            output_tpm=self.output_tpm if self.output_tpm is not None else default.output_tpm,
        )


@dataclass(frozen=True, slots=True)
class BudgetLimit:
    """A scope's monthly money limit (micro-units) and what happens near it."""

    limit_micro: int | None  # None: not limited
    soft_pct: int = 80
    downgrade_alias: str | None = None  # past the soft threshold, serve this alias instead
    max_calls: int | None = None  # agent runs: calls per run
    env: str = "any"  # which keys may spend it: any, prod, dev (a dev key never spends a prod budget)
    spend_per_hour_micro: int | None = None  # key/team scopes: the fast spend bucket (``admission.spend_rate``)


@dataclass(frozen=True)
class BudgetPolicy:
    timezone: str = "Asia/Kolkata"
    per_request_cap_micro: int | None = None  # denial-of-wallet guard on the worst case
    run_default: BudgetLimit = BudgetLimit(None)
    scopes: Mapping[str, BudgetLimit] = field(default_factory=dict)

    def limit_for(self, scope: str) -> BudgetLimit | None:
        if scope in self.scopes:
            return self.scopes[scope]
        if scope.startswith("run:"):
            return self.run_default
        return None


@dataclass(frozen=True)
class RatePolicy:
    key_default: KeyLimits = KeyLimits()
    team_tpm: Mapping[str, int] = field(default_factory=dict)  # input + output tokens per minute
    mirror_pct: int = 90  # deployment buckets at this share of the provider's limits


@dataclass(frozen=True, slots=True)
class KeyRecord:
    key_id: str  # display prefix, e.g. "fb-dev-1a2b" (not secret)
    key_hash: str  # sha256 hex of the full key
    team: str
    app: str
    business_unit: str | None
    aliases: frozenset[str]
    data_class_ceiling: str = "internal"
    default_data_class: str = "internal"
    expires_at: float | None = None  # unix seconds UTC
    revoked: bool = False
    limits: KeyLimits = KeyLimits()
    env: str = "dev"  # dev | prod
    env_conflict: str | None = None  # a budget scope of the other environment this key would charge
    regions: frozenset[str] = frozenset()  # residency pin: only deployments in these regions (empty: any)
    deployments: frozenset[str] = frozenset()  # only these deployment ids (empty: any of its aliases')


ADMIN_ROLES = ("admin", "finance", "auditor")


@dataclass(frozen=True, slots=True)
class AdminToken:
    name: str
    role: str  # admin: everything; finance: budgets and usage; auditor: read-only
    token_hash: str


@dataclass(frozen=True, slots=True)
class Team:
    name: str
    business_unit: str | None = None
    cost_centre: str | None = None  # finance's allocation code for the team's spend
    body_log: bool = False  # opt-in: request and answer bodies kept encrypted (per-team key) for the retention


@dataclass(frozen=True, slots=True)
class App:
    team: str
    name: str
    cost_centre: str | None = None  # overrides the team's when set


@dataclass(frozen=True)
class Snapshot:
    version: int
    content_hash: str
    keys: Mapping[str, KeyRecord]  # by key_hash
    aliases: Mapping[str, Alias]
    deployments: Mapping[str, Deployment]
    teams: Mapping[str, Team]
    price_book: PriceBook
    fx: FxTable
    business_units: frozenset[str] = field(default_factory=frozenset)
    currency: str = "INR"
    budgets: BudgetPolicy = BudgetPolicy()
    rate_limits: RatePolicy = RatePolicy()
    admin_tokens: Mapping[str, AdminToken] = field(default_factory=dict)  # by token hash
    apps: Mapping[str, App] = field(default_factory=dict)  # by "team/app"
    privacy: PrivacyPolicy = PrivacyPolicy()  # scanner classes and per-class redact/refuse/allow
    shadow_keys: Mapping[str, KeyRecord] = field(default_factory=dict)  # by key id: the shadowed aliases' own

    def cost_centre_of(self, team: str, app: str) -> str | None:
        """The cost centre a request of ``team``/``app`` is allocated to: the app's, else the team's."""
        found = self.apps.get(f"{team}/{app}")
        if found is not None and found.cost_centre is not None:
            return found.cost_centre
        owner = self.teams.get(team)
        return owner.cost_centre if owner is not None else None

    def key_by_secret(self, presented: str) -> KeyRecord | None:
        return self.keys.get(hash_key(presented))

    @cached_property
    def keys_by_id(self) -> Mapping[str, KeyRecord]:
        """The keys by their display id (built once per snapshot, on first use: the batch runner's lines)."""
        return MappingProxyType({k.key_id: k for k in self.keys.values()})


def hash_key(presented: str) -> str:
    return hashlib.sha256(presented.encode("utf-8")).hexdigest()


class Secrets:
    """Provider keys by name, in memory only. ``repr`` never shows values.

    With ``hosts`` (the declarations, ``proxy.snapshot.secrets``) a key is handed out only for a URL whose
    host it was declared for (``for_url``); without, for any URL (tests and tools that build their own)."""

    __slots__ = ("_values", "hosts")

    def __init__(self, values: Mapping[str, str] | None = None, hosts: SecretHosts | None = None) -> None:
        self._values = dict(values or {})
        self.hosts = hosts

    def get(self, name: str | None) -> str | None:
        return self._values.get(name) if name else None

    def for_url(self, name: str | None, url: str) -> str | None:
        """The key ``name`` for a request to ``url``; raises ``SecretNotDeclared`` for a host it is not for."""
        if not name:
            return None
        if self.hosts is not None:
            self.hosts.check(name, url)
        return self._values.get(name)

    def merge(self, values: Mapping[str, str]) -> None:
        """Add keys named by deployments published after start-up (the same object stays shared)."""
        self._values.update({k: v for k, v in values.items() if v})

    def names(self) -> frozenset[str]:
        return frozenset(self._values)

    def values(self) -> list[str]:
        """For redaction filters only."""
        return [v for v in self._values.values() if v]

    def __repr__(self) -> str:
        return f"Secrets({sorted(self._values)})"
