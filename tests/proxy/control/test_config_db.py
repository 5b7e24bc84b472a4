"""The config database as the control plane's store: changes, validation, audit, apply, last good snapshot."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import orjson
import pytest
import yaml

from proxy.control.apply import apply_tree
from proxy.control.db.store import ConfigDB
from proxy.control.document import compile_document, content_hash, load_last_good, save_last_good
from proxy.control.errors import ConfigRejected, ControlConflict
from proxy.control.service import ControlService
from proxy.snapshot import hash_key

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def tree() -> dict:
    t = yaml.safe_load((ROOT / "examples" / "farebox.yaml").read_text())
    return {k: v for k, v in t.items() if k not in ("server", "event_log", "state_dir", "secrets_file")}


@pytest.fixture
def svc(tmp_path: Path, tree: dict) -> ControlService:
    db = ConfigDB(f"sqlite:///{tmp_path / 'control.sqlite'}")
    db.migrate()
    db.seed_once(apply_tree(tree, db.now(), "bootstrap", None, []), "bootstrap")
    yield ControlService(db)
    db.close()


def snapshot_of(svc: ControlService):  # type: ignore[no-untyped-def]
    version, _ = svc.db.head()
    return compile_document(svc.db.document(version), version)


async def test_key_lifecycle_create_revoke_rotate(svc: ControlService) -> None:
    view, plaintext = await svc.create_key("ops", {"team": "platform", "app": "playground", "aliases": ["chat-default"],
                                                   "env": "prod"})
    snap = snapshot_of(svc)
    rec = snap.keys[hash_key(plaintext)]
    assert rec.key_id == view["id"] and rec.env == "prod" and not rec.revoked
    after, new_plain = await svc.rotate_key("ops", view["id"], 60)
    snap = snapshot_of(svc)
    old, new = snap.keys[hash_key(plaintext)], snap.keys[hash_key(new_plain)]
    assert old.expires_at is not None and 0 < old.expires_at - datetime.now(timezone.utc).timestamp() <= 61
    assert new.expires_at is None and new.aliases == old.aliases and after["new"]["rotated_from"] == view["id"]
    await svc.revoke_key("ops", after["new"]["id"])
    assert snapshot_of(svc).keys[hash_key(new_plain)].revoked
    # the plaintext is in no row, no document, no audit record
    doc = orjson.dumps(svc.db.document(svc.db.head()[0])).decode()
    audit = orjson.dumps(await svc.audit(100)).decode()
    for secret in (plaintext, new_plain):
        assert secret not in doc and secret not in audit


async def test_rejected_change_lists_every_problem_and_is_audited(svc: ControlService) -> None:
    before = svc.db.head()
    with pytest.raises(ConfigRejected) as err:
        await svc.put_alias("ops", "chat-broken", {"kind": "chat", "deployments": ["ghost", "sim-openai-mumbai"],
                                                   "needs": ["telepathy"], "fallback_alias": "nowhere"})
    text = " | ".join(err.value.problems)
    for fragment in ("unknown deployment 'ghost'", "telepathy", "unknown alias 'nowhere'"):
        assert fragment in text
    assert err.value.to_body()["error"]["problems"] == err.value.problems
    assert svc.db.head() == before  # nothing published
    last = (await svc.audit(1))[0]
    assert last["outcome"] == "rejected" and last["actor"] == "ops" and last["after"]["problems"]


async def test_audit_has_actor_before_and_after(svc: ControlService) -> None:
    await svc.set_budget("fin", "team:platform", {"monthly_limit": "123.45", "soft_pct": 70})
    row = (await svc.audit(1))[0]
    assert row["actor"] == "fin" and row["action"] == "budgets.set" and row["object"] == "budget:team:platform"
    assert row["before"]["monthly_limit"] == "50000.00" and row["after"]["monthly_limit"] == "123.45"
    assert row["snapshot_version"] == svc.db.head()[0]
    assert snapshot_of(svc).budgets.limit_for("team:platform").limit_micro == 123_450_000


async def test_prices_are_new_versions_and_large_changes_need_a_flag(svc: ControlService) -> None:
    with pytest.raises(ConfigRejected) as err:
        await svc.add_prices("ops", {"valid_from": "2026-06-01T00:00:00Z",
                                     "prices": {"sim-openai-mumbai": {"currency": "USD", "input": "20.00", "output": "10.00"}}})
    assert "sim-openai-mumbai.input" in err.value.problems[0] and "allow_large_change" in err.value.problems[0]
    done = await svc.add_prices("ops", {"valid_from": "2026-06-01T00:00:00Z", "allow_large_change": True,
                                        "prices": {"sim-openai-mumbai": {"currency": "USD", "input": "20.00", "output": "10.00"}}})
    assert done["version"] == 2
    with pytest.raises(ControlConflict):
        await svc.add_prices("ops", {"prices": {"sim-openai-mumbai": {"input": "2", "output": "10"}}}, number=2)
    book = snapshot_of(svc).price_book
    assert [v.version for v in book.versions] == [1, 2]
    assert str(book.get(1).price("sim-openai-mumbai").input) == "2.00"  # version 1 untouched
    assert str(book.get(2).price("sim-anthropic-mumbai").input) == "3.00"  # carried forward


async def test_apply_is_idempotent_and_prints_a_diff(svc: ControlService, tree: dict) -> None:
    diff, done = await svc.apply("ops", tree)
    assert diff == [] and not done.changed
    tree["teams"].append({"name": "growth", "business_unit": "retail"})
    tree["aliases"][0]["deployments"] = ["sim-openai-mumbai"]
    tree["prices"] = {"version": 2, "valid_from": "2026-07-01T00:00:00Z"}  # same prices, a new version
    diff, done = await svc.apply("ops", tree)
    assert "+ team growth: {business_unit: 'retail'}" in diff
    assert any(line.startswith("~ alias chat-default: deployments:") for line in diff)
    assert any(line.startswith("+ price version 2") for line in diff) and done.changed
    diff, again = await svc.apply("ops", tree)
    assert diff == [] and again.version == done.version
    tree["deployments"][0]["price_per_1m"]["input"] = "2.10"  # editing a published version is refused
    with pytest.raises(ConfigRejected) as err:
        await svc.apply("ops", tree)
    assert "never edited" in err.value.problems[0]


async def test_dev_key_cannot_spend_a_production_budget(svc: ControlService) -> None:
    await svc.set_budget("fin", "team:kyc-ops", {"monthly_limit": "10.00", "env": "prod"})
    _, dev = await svc.create_key("ops", {"team": "kyc-ops", "app": "kyc-summariser", "aliases": ["chat-default"]})
    _, prod = await svc.create_key("ops", {"team": "kyc-ops", "app": "kyc-summariser", "aliases": ["chat-default"],
                                           "env": "prod"})
    snap = snapshot_of(svc)
    assert snap.keys[hash_key(dev)].env_conflict == "team:kyc-ops"
    assert snap.keys[hash_key(prod)].env_conflict is None


async def test_finance_style_key_spec_problems_all_at_once(svc: ControlService) -> None:
    with pytest.raises(ConfigRejected) as err:
        await svc.create_key("ops", {"team": "platform", "app": "x", "aliases": [], "env": "staging", "rpm": 0,
                                     "colour": "blue"})
    text = " | ".join(err.value.problems)
    for fragment in ("env: must be one of", "rpm: must be >= 1", "colour: unknown field", "at least one alias"):
        assert fragment in text


def test_last_good_snapshot_roundtrip_and_tamper_check(svc: ControlService, tmp_path: Path) -> None:
    version, digest = svc.db.head()
    doc = svc.db.document(version)
    assert content_hash(doc) == digest
    save_last_good(tmp_path, version, doc)
    assert load_last_good(tmp_path) == (version, doc)
    raw = orjson.loads((tmp_path / "snapshot.json").read_bytes())
    raw["document"]["control"]["currency"] = "USD"
    (tmp_path / "snapshot.json").write_bytes(orjson.dumps(raw))
    with pytest.raises(Exception, match="hash mismatch"):
        load_last_good(tmp_path)


async def test_cost_centres_from_the_file_the_api_and_the_database(svc: ControlService, tree: dict) -> None:
    snap = snapshot_of(svc)
    assert snap.teams["platform"].cost_centre == "CC-1001"
    assert snap.cost_centre_of("platform", "playground") == "CC-1001"  # no app cost centre: the team's
    assert snap.cost_centre_of("kyc-ops", "kyc-summariser") == "CC-2042"  # the app's overrides the team's
    assert snap.cost_centre_of("nobody", "nothing") is None
    tree["apps"][0]["cost_centre"] = "CC-1077"
    tree["teams"][1]["cost_centre"] = "CC-2002"
    diff, done = await svc.apply("ops", tree)
    assert "~ app platform/playground: cost_centre: None -> 'CC-1077'" in diff
    assert "~ team kyc-ops: cost_centre: 'CC-2001' -> 'CC-2002'" in diff and done.changed
    assert (await svc.apply("ops", tree))[0] == []  # idempotent
    snap = snapshot_of(svc)
    assert snap.cost_centre_of("platform", "playground") == "CC-1077"
    assert snap.teams["kyc-ops"].cost_centre == "CC-2002"
    # the admin API's PUT: an omitted field keeps its value, null clears it
    after = await svc.put_team("ops", "platform", {"cost_centre": "CC-1500"})
    assert after == {"name": "platform", "business_unit": "retail", "cost_centre": "CC-1500", "body_log": False}
    after = await svc.put_team("ops", "platform", {"cost_centre": None})
    assert after == {"name": "platform", "business_unit": "retail", "cost_centre": None, "body_log": False}
    assert snapshot_of(svc).teams["platform"].cost_centre is None
    with pytest.raises(ConfigRejected) as err:
        await svc.put_team("ops", "platform", {"cost_centre": "x" * 65, "business_unit": "nowhere"})
    assert len(err.value.problems) == 2 and "cost_centre" in err.value.problems[1]


def test_a_bad_cost_centre_in_the_file_is_named(tree: dict) -> None:
    from proxy.control.declarative import compile_snapshot
    from proxy.control.problems import Problems

    tree["teams"][0]["cost_centre"] = ""
    tree["apps"][0]["cost_centre"] = "y" * 65
    problems = Problems()
    assert compile_snapshot(tree, problems=problems) is None
    text = "\n".join(str(p) for p in problems.items)
    assert "teams[0].cost_centre" in text and "apps[0].cost_centre" in text, text


async def test_an_apps_cost_centre_is_set_kept_and_cleared(svc: ControlService) -> None:
    assert await svc.put_app("ops", "platform", "playground", {"cost_centre": "CC-1077"}) == {
        "team": "platform", "name": "playground", "cost_centre": "CC-1077"}
    assert snapshot_of(svc).cost_centre_of("platform", "playground") == "CC-1077"
    await svc.put_app("ops", "platform", "newbot", {})  # a new app, allocated to its team
    snap = snapshot_of(svc)
    assert snap.apps["platform/newbot"].cost_centre is None and snap.cost_centre_of("platform", "newbot") == "CC-1001"
    await svc.put_app("ops", "platform", "playground", {"cost_centre": None})
    assert snapshot_of(svc).cost_centre_of("platform", "playground") == "CC-1001"
    for team, body, why in (("nobody", {}, "unknown team"), ("platform", {"cost_centre": ""}, "cost_centre"),
                            ("platform", {"colour": "red"}, "colour")):
        with pytest.raises(ConfigRejected) as err:
            await svc.put_app("ops", team, "x", body)
        assert why in err.value.problems[0]


async def test_a_team_opts_in_to_body_logging_through_the_api(svc: ControlService) -> None:
    after = await svc.put_team("ops", "platform", {"body_log": True})
    assert after["body_log"] is True and snapshot_of(svc).teams["platform"].body_log
    assert (await svc.put_team("ops", "platform", {"cost_centre": "CC-9"}))["body_log"] is True  # omitted: kept
    with pytest.raises(ConfigRejected) as err:
        await svc.put_team("ops", "platform", {"body_log": "yes"})
    assert err.value.problems == ["body_log: must be true or false, got 'yes'"]
    await svc.put_team("ops", "platform", {"body_log": False})
    assert not snapshot_of(svc).teams["platform"].body_log


def test_the_files_privacy_policy_is_kept_in_the_database(tmp_path: Path, tree: dict) -> None:
    tree["privacy"]["classes"]["confidential"] = {"action": "allow", "fail": "closed"}
    db = ConfigDB(f"sqlite:///{tmp_path / 'privacy.sqlite'}")
    try:
        db.migrate()
        db.seed_once(apply_tree(tree, db.now(), "bootstrap", None, []), "bootstrap")
        version, _ = db.head()
        snap = compile_document(db.document(version), version)
        assert snap.privacy.rules["confidential"].action == "allow"
        assert snap.privacy.rules["restricted"].action == "refuse"
    finally:
        db.close()
