"""Config canaries in the config database: one open rollout at a time, a step taken once (compare-and-set), every
process's figures added up, a rollback's revert publishing the baseline's routing over today's keys."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from proxy.control import rollout_store as store
from proxy.control.apply import apply_tree
from proxy.control.db.store import ConfigDB
from proxy.control.errors import ControlConflict, ControlNotFound
from proxy.control.rollout import ArmStats
from proxy.control.service import ControlService

ROOT = Path(__file__).resolve().parents[3]
NOW = datetime(2026, 12, 6, 12, tzinfo=timezone.utc)


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[ControlService]:
    tree = yaml.safe_load((ROOT / "examples" / "farebox.yaml").read_text())
    tree = {k: v for k, v in tree.items() if k not in ("server", "event_log", "state_dir", "secrets_file")}
    db = ConfigDB(f"sqlite:///{tmp_path / 'control.sqlite'}")
    db.migrate()
    db.seed_once(apply_tree(tree, db.now(), "bootstrap", None, []), "bootstrap")
    yield ControlService(db)
    db.close()


def _aliases(db: ConfigDB) -> dict[str, list[str]]:
    doc = db.document(db.head()[0])
    return {a["name"]: a["deployments"] for a in doc["control"]["aliases"]}


async def test_one_open_rollout_a_step_once_and_the_figures_of_every_process(svc: ControlService) -> None:
    db = svc.db
    view = store.start(db, "ops", {"stages": [10, 100], "window_s": 60})
    assert view["state"] == "armed" and view["baseline"] == db.head()[0]
    with pytest.raises(ControlConflict, match="armed"):
        store.start(db, "ops", {})
    r, _ = store.latest(db)
    running = replace(r, state="running", stage_since=NOW, candidate=r.baseline + 1)
    assert store.step(db, r, running, "pod-a", "start", candidate=r.baseline + 1)
    assert not store.step(db, r, running, "pod-b", "start")  # pod-b read it armed too: too late
    for process, errors in (("pod-a:1", 1), ("pod-b:2", 3)):
        stats = ArmStats()
        for i in range(10):
            stats.record(500 if i < errors else 200, 40, 1_000)
        store.add_stats(db, r.id, 0, process, {"candidate": stats})
    store.add_stats(db, r.id, 0, "pod-a:1", {"candidate": ArmStats(requests=1, cost_micro=5)})
    arms = store.stage_stats(db, r.id, 0)
    assert (arms["candidate"].requests, arms["candidate"].errors, arms["candidate"].cost_micro) == (21, 4, 20_005)
    assert arms["baseline"].requests == 0
    audit = db.audit(10, "rollout:")
    assert [a["action"] for a in audit] == ["rollout.start", "rollout.arm"]


async def test_a_rollback_publishes_the_baseline_routing_over_todays_keys(svc: ControlService) -> None:
    db = svc.db
    store.start(db, "ops", {"stages": [50, 100]})
    before = _aliases(db)
    await svc.put_alias("ops", "chat-default", {"kind": "chat", "deployments": ["sim-openai-mumbai"]})
    _, plaintext = await svc.create_key("ops", {"team": "platform", "app": "playground", "aliases": ["chat-default"]})
    assert _aliases(db)["chat-default"] == ["sim-openai-mumbai"]
    keys = len(db.document(db.head()[0])["keys"])
    r, _ = store.latest(db)
    _, after = store.by_hand(db, "ops", r.id, "rollback", NOW)
    assert after.state == "rolled_back" and after.reason == "rollback by ops"
    version = store.revert(db, after, "ops")
    assert db.head()[0] == version and _aliases(db) == before
    assert len(db.document(version)["keys"]) == keys  # the key made meanwhile stays
    assert store.latest(db)[1] == version  # reverted_to: pods stop keeping the baseline apart
    with pytest.raises(ControlConflict, match="cannot pause"):
        store.by_hand(db, "ops", r.id, "pause", NOW)
    with pytest.raises(ControlNotFound):
        store.by_hand(db, "ops", 999, "pause", NOW)
