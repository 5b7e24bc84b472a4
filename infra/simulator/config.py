"""Simulator configuration: model profiles, fault rates, accounts.

YAML layout (every key optional)::

    seed: 0                      # seeds the fault RNG
    billing_file: var/sim.jsonl  # append one JSON line per billed request
    strict_params: true          # 400 on request fields the real API rejects
    accounts: [{name: acme, api_key: sk-sim-acme}]
    defaults: {ttft_ms: 0, tokens_per_s: 0, output_tokens: 32,
               context_window: 128000, embedding_dims: 256,
               faults: {rate_429: 0.0, retry_after_s: 1, ...}}
    models:
      gpt-4o-mini: {ttft_ms: 150, faults: {rate_500: 0.01}}

A model's profile is ``defaults`` overlaid with its ``models`` entry; a
model that is not listed gets ``defaults``. ``POST /_sim/models/{model}``
accepts the same fields as a ``models`` entry. Validation collects every
problem with its dotted path and raises one :class:`ConfigError`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import yaml


class ConfigError(ValueError):
    """Invalid simulator configuration; ``errors`` lists ``path: problem``."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = list(errors)
        super().__init__("invalid simulator config:\n  " + "\n  ".join(self.errors))


@dataclass(frozen=True, slots=True)
class FaultProfile:
    """Per-model fault probabilities (each drawn per request) and shapes."""

    rate_429: float = 0.0
    retry_after_s: float = 1
    rate_500: float = 0.0
    rate_503: float = 0.0
    rate_hang: float = 0.0
    rate_disconnect: float = 0.0
    disconnect_after_tokens: int = 5
    rate_content_policy: float = 0.0
    rate_stream_error: float = 0.0  # error event after disconnect_after_tokens


@dataclass(frozen=True, slots=True)
class ModelProfile:
    """How one model behaves: latency, pacing, length, limits, faults."""

    ttft_ms: float = 0
    tokens_per_s: float = 0  # 0 = no pacing
    output_tokens: int = 32
    context_window: int = 128000
    embedding_dims: int = 256
    # the provider's quota for each account on this model, per minute (0: none, and no rate-limit headers):
    # answers carry the provider's x-ratelimit-* (anthropic-ratelimit-*) headers; past it, a 429
    rpm: int = 0
    tpm: int = 0  # input tokens + the output cap asked for, as Azure and OpenAI count a request
    batch_line_ms: float = 5  # how long one line of a provider batch takes (lines run one after another)
    faults: FaultProfile = field(default_factory=FaultProfile)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True, slots=True)
class Account:
    name: str
    api_key: str
    # Vertex AI: the service account whose signed assertions POST /token exchanges for this account's tokens
    google_client_email: str | None = None
    google_public_key: str | None = None  # its public key (PEM); the private key stays with the caller

    def __repr__(self) -> str:  # never print keys
        return f"Account({self.name!r})"


@dataclass(frozen=True, slots=True)
class SimulatorConfig:
    seed: int = 0
    billing_file: str | None = None
    strict_params: bool = True
    accounts: tuple[Account, ...] = ()
    defaults: ModelProfile = field(default_factory=ModelProfile)
    models: dict[str, ModelProfile] = field(default_factory=dict)

    def profile(self, model: str) -> ModelProfile:
        return self.models.get(model, self.defaults)


_RATE_FIELDS = {f.name for f in dataclasses.fields(FaultProfile) if f.name.startswith("rate_")}
_NUMBER = (int, float)


def _is_number(v: Any) -> bool:
    return isinstance(v, _NUMBER) and not isinstance(v, bool)


def _check_faults(data: Any, base: FaultProfile, path: str, errors: list[str]) -> FaultProfile:
    if not isinstance(data, dict):
        errors.append(f"{path}: must be a mapping")
        return base
    values: dict[str, Any] = {}
    known = {f.name for f in dataclasses.fields(FaultProfile)}
    for key, v in data.items():
        p = f"{path}.{key}"
        if key not in known:
            errors.append(f"{p}: unknown field")
        elif key in _RATE_FIELDS:
            if not _is_number(v) or not 0.0 <= v <= 1.0:
                errors.append(f"{p}: must be a number in [0, 1]")
            else:
                values[key] = float(v)
        elif key == "retry_after_s":
            if not _is_number(v) or v < 0:
                errors.append(f"{p}: must be a number >= 0")
            else:
                values[key] = v
        elif key == "disconnect_after_tokens":
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                errors.append(f"{p}: must be an integer >= 0")
            else:
                values[key] = v
    total = sum(values.get(k, getattr(base, k)) for k in _RATE_FIELDS)
    if total > 1.0 + 1e-9:
        errors.append(f"{path}: fault rates sum to {total:g}, must be <= 1")
    return dataclasses.replace(base, **values)


_PROFILE_RULES: dict[str, tuple[str, float]] = {
    # field: (kind, minimum)
    "ttft_ms": ("number", 0),
    "tokens_per_s": ("number", 0),
    "output_tokens": ("int", 0),
    "context_window": ("int", 1),
    "embedding_dims": ("int", 1),
    "rpm": ("int", 0),
    "tpm": ("int", 0),
    "batch_line_ms": ("number", 0),
}


def merge_profile(data: Any, base: ModelProfile, path: str, errors: list[str]) -> ModelProfile:
    """Overlay a (partial) profile mapping on ``base``, appending problems to ``errors``."""
    if not isinstance(data, dict):
        errors.append(f"{path}: must be a mapping")
        return base
    values: dict[str, Any] = {}
    for key, v in data.items():
        p = f"{path}.{key}"
        if key == "faults":
            values["faults"] = _check_faults(v, base.faults, p, errors)
        elif key not in _PROFILE_RULES:
            errors.append(f"{p}: unknown field")
        else:
            kind, minimum = _PROFILE_RULES[key]
            ok = _is_number(v) if kind == "number" else isinstance(v, int) and not isinstance(v, bool)
            if not ok or v < minimum:
                what = "a number" if kind == "number" else "an integer"
                errors.append(f"{p}: must be {what} >= {minimum:g}")
            else:
                values[key] = v
    return dataclasses.replace(base, **values)


def parse_profile_update(data: Any, base: ModelProfile) -> ModelProfile:
    """Validate a runtime profile change; raise :class:`ConfigError` listing every problem."""
    errors: list[str] = []
    profile = merge_profile(data, base, "profile", errors)
    if errors:
        raise ConfigError(errors)
    return profile


def _parse_accounts(data: Any, errors: list[str]) -> tuple[Account, ...]:
    if not isinstance(data, list):
        errors.append("accounts: must be a list")
        return ()
    out: list[Account] = []
    names: set[str] = set()
    keys: set[str] = set()
    for i, item in enumerate(data):
        p = f"accounts[{i}]"
        if not isinstance(item, dict):
            errors.append(f"{p}: must be a mapping with name and api_key")
            continue
        for extra in sorted(set(item) - {"name", "api_key", "google_client_email", "google_public_key"}):
            errors.append(f"{p}.{extra}: unknown field")
        name, key = item.get("name"), item.get("api_key")
        if not isinstance(name, str) or not name:
            errors.append(f"{p}.name: must be a non-empty string")
        elif name in names:
            errors.append(f"{p}.name: duplicate account {name!r}")
        if not isinstance(key, str) or not key:
            errors.append(f"{p}.api_key: must be a non-empty string")
        elif key in keys:
            errors.append(f"{p}.api_key: same key as an earlier account")  # never echo it
        if isinstance(name, str) and name and isinstance(key, str) and key:
            names.add(name)
            keys.add(key)
            email, public = item.get("google_client_email"), item.get("google_public_key")
            if (email is None) != (public is None) or not all(v is None or isinstance(v, str) for v in (email, public)):
                errors.append(f"{p}: google_client_email and google_public_key go together, as strings")
                email = public = None
            out.append(Account(name, key, email, public))
    return tuple(out)


def parse_config(data: Any) -> SimulatorConfig:
    """Build a config from already-parsed YAML/JSON data."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(["<root>: must be a mapping"])
    errors: list[str] = []
    kwargs: dict[str, Any] = {}
    known = {"seed", "billing_file", "strict_params", "accounts", "defaults", "models"}
    for key in data:
        if key not in known:
            errors.append(f"{key}: unknown field")
    if "seed" in data:
        if not isinstance(data["seed"], int) or isinstance(data["seed"], bool):
            errors.append("seed: must be an integer")
        else:
            kwargs["seed"] = data["seed"]
    if data.get("billing_file") is not None:
        if not isinstance(data["billing_file"], str) or not data["billing_file"]:
            errors.append("billing_file: must be a path string")
        else:
            kwargs["billing_file"] = data["billing_file"]
    if "strict_params" in data:
        if not isinstance(data["strict_params"], bool):
            errors.append("strict_params: must be true or false")
        else:
            kwargs["strict_params"] = data["strict_params"]
    if "accounts" in data:
        kwargs["accounts"] = _parse_accounts(data["accounts"], errors)
    defaults = ModelProfile()
    if "defaults" in data:
        defaults = merge_profile(data["defaults"], defaults, "defaults", errors)
    models: dict[str, ModelProfile] = {}
    raw_models = data.get("models") or {}
    if not isinstance(raw_models, dict):
        errors.append("models: must be a mapping of model id to profile")
    else:
        for name, prof in raw_models.items():
            models[str(name)] = merge_profile(prof or {}, defaults, f"models.{name}", errors)
    if errors:
        raise ConfigError(errors)
    return SimulatorConfig(defaults=defaults, models=models, **kwargs)


def load_config(path: str | None) -> SimulatorConfig:
    """Load a YAML config file; ``None`` gives the defaults."""
    if path is None:
        return SimulatorConfig()
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read ({exc.strerror})"]) from exc
    except yaml.YAMLError as exc:
        raise ConfigError([f"{path}: invalid YAML ({exc})"]) from exc
    return parse_config(data)
