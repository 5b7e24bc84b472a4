"""Mutable simulator state shared by the handlers: profiles, accounts, RNG, billing, export drift, stats,
received bodies."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from infra.simulator.batch_store import Batches
from infra.simulator.billing import BillingLedger
from infra.simulator.config import ModelProfile, SimulatorConfig, parse_profile_update
from infra.simulator.export_drift import AccountDrift, parse_drift_update
from infra.simulator.faults import FaultDecider
from infra.simulator.prompt_cache import PromptCache
from infra.simulator.quota import Quotas
from infra.simulator.received import ReceivedLog
from infra.simulator.stats import Stats

DEFAULT_ACCOUNT = "default"


class SimState:
    """Everything a request reads or updates; ``reset()`` returns it to the config's state."""

    def __init__(self, config: SimulatorConfig) -> None:
        self.config = config
        self.overrides: dict[str, ModelProfile] = {}
        self._accounts = {a.api_key: a.name for a in config.accounts}
        self.faults = FaultDecider(config.seed)
        self.billing = BillingLedger(config.billing_file)
        self.drifts: dict[str, AccountDrift] = {}
        self.stats = Stats()
        self.received = ReceivedLog()
        self.prompt_cache = PromptCache()  # Anthropic cache_control prefixes
        self.google_tokens: dict[str, str] = {}  # OAuth access token the /token endpoint issued -> account
        self.quotas = Quotas()  # the provider's per-minute quota per account and model (profiles' rpm, tpm)
        self.batches = Batches()  # the batch APIs' files and batches

    def profile(self, model: str) -> ModelProfile:
        prof = self.overrides.get(model)
        return prof if prof is not None else self.config.profile(model)

    def set_profile(self, model: str, data: Any) -> ModelProfile:
        """Overlay ``data`` on the model's current profile (raises ConfigError)."""
        prof = parse_profile_update(data, self.profile(model))
        self.overrides[model] = prof
        return prof

    def has_account(self, name: str) -> bool:
        """Whether ``name`` is an account requests can bill to."""
        return name in self._accounts.values() if self._accounts else name == DEFAULT_ACCOUNT

    def drift(self, account: str) -> AccountDrift:
        return self.drifts.get(account, AccountDrift())

    def set_drift(self, account: str, data: Any) -> AccountDrift:
        """Overlay ``data`` on the account's export drift (raises ConfigError)."""
        drift = parse_drift_update(data, self.drift(account))
        self.drifts[account] = drift
        return drift

    def api_keys(self) -> list[str]:
        """Every account's key (dialects that authenticate by signature look the signer up here)."""
        return list(self._accounts)

    def account_for(self, key: str | None) -> str | None:
        """The account a presented key belongs to, or None (the key is never logged)."""
        if not key:
            return None
        if not self._accounts:
            return DEFAULT_ACCOUNT
        return self._accounts.get(key)

    def reset(self) -> None:
        """Clear runtime profile changes, export drift, stats, billing, received bodies and cached prompts; restart the fault RNG."""
        self.overrides.clear()
        self.drifts.clear()
        self.faults.reset()
        self.billing.reset()
        self.stats.reset()
        self.received.reset()
        self.prompt_cache.clear()
        self.quotas.reset()
        self.batches.reset()


STATE = web.AppKey("farebox_simulator_state", SimState)
