"""In-process stand-ins for a pod's ports, for the request-path unit tests.

``MemoryLog`` is a real event sink (it keeps what it is given, in order, and
acknowledges with offsets); ``ScriptedBudgets`` is a ``BudgetPort`` whose
answers a test sets and whose calls it reads. The snapshot is the example
config's, its deployments pointed at an in-process simulator when asked.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import yaml

from ledger.events import Event
from proxy.admission.budget_port import BudgetAsk, Funding, ScopeState
from proxy.control.declarative import CONTROL_SECTIONS, compile_snapshot
from proxy.control.keys import mint_key
from proxy.errors import GatewayError
from proxy.limits import Buckets, MemoryBuckets
from proxy.metering.recorder import Fold, Recorder
from proxy.observe.metrics import Metrics
from proxy.runtime import PodState, ProxyOptions, Runtime
from proxy.snapshot import Secrets, Snapshot
from proxy.upstream.relay import UpstreamClient
from tests.harness import EXAMPLES

NOW_S = 1_795_000_000.0  # 2026-11-18, inside the example's FX table
SECRETS = Secrets({"SIM_OPENAI_KEY": "sk-sim-openai-retail-0001", "SIM_ANTHROPIC_KEY": "sk-sim-anthropic-retail-0001"})


def example_tree(base_url: str | None = None) -> dict[str, Any]:
    """The example config's control sections; deployments sent to ``base_url`` (a simulator) if given."""
    tree = {k: v for k, v in yaml.safe_load((EXAMPLES / "farebox.yaml").read_text()).items() if k in CONTROL_SECTIONS}
    if base_url is not None:
        for dep in tree["deployments"]:
            dep["base_url"] = f"{base_url}/v1" if dep["dialect"] == "openai" else base_url
    return tree


def snapshot(tree: Mapping[str, Any] | None = None, keys: Sequence[Mapping[str, Any]] = ()) -> Snapshot:
    snap = compile_snapshot(tree if tree is not None else example_tree(), keys)
    assert snap is not None
    return snap


def key(team: str = "platform", app: str = "playground", **limits: int) -> tuple[str, dict[str, Any]]:
    """(plaintext, stored record) of a fresh virtual key."""
    minted = mint_key(team=team, app=app, aliases=["chat-default", "embed-default"], now_iso="2026-01-01T00:00:00Z",
                      limits=limits or None)
    return minted.plaintext, minted.record


class MemoryLog:
    """An ``EventSink`` that keeps every event it accepts, acknowledging each with the next offset."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.refuse = False

    def append(self, event: Event) -> asyncio.Future[int]:
        if self.refuse:
            raise RuntimeError("the log is closed")
        self.events.append(event)
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        fut.set_result(len(self.events))
        return fut

    def types(self) -> list[str]:
        return [e.type for e in self.events]


class ScriptedBudgets:
    """A ``BudgetPort`` that funds every ask (or raises ``refusal``) and records what it was told."""

    def __init__(self) -> None:
        self.refusal: GatewayError | None = None
        self.funding = Funding({}, [], None, False)
        self.downgrade: str | None = None
        self.asks: list[BudgetAsk] = []
        self.settled: dict[str, Mapping[str, int]] = {}
        self.released: list[str] = []

    async def admit(self, snapshot: Snapshot, ask: BudgetAsk) -> Funding:
        self.asks.append(ask)
        if self.refusal is not None:
            raise self.refusal
        return self.funding

    def settle(self, request_id: str, charges: Mapping[str, int]) -> None:
        self.settled[request_id] = dict(charges)

    def release(self, request_id: str) -> None:
        self.released.append(request_id)

    def handed_over(self, request_id: str) -> None:
        self.released.append(request_id)

    async def state(self, snapshot: Snapshot, scope: str, period: str | None, now_s: float) -> ScopeState | None:
        return None

    def downgrade_target(self, snapshot: Snapshot, scopes: Sequence[str], now_s: float) -> str | None:
        return self.downgrade


def runtime(snap: Snapshot, *, budgets: Any = None, limits: Buckets | None = None, log: MemoryLog | None = None,
            fold: Fold | None = None, clock: Callable[[], float] = lambda: NOW_S) -> Runtime:
    recorder = Recorder(log if log is not None else MemoryLog(), Metrics(), fold=fold)
    return Runtime(pod=PodState(snap), secrets=SECRETS, options=ProxyOptions(pod_id="pod-test"), recorder=recorder,
                   budgets=budgets if budgets is not None else ScriptedBudgets(),
                   limits=limits if limits is not None else MemoryBuckets(), upstream=UpstreamClient(SECRETS),
                   clock=clock)
