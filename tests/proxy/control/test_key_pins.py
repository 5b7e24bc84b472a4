"""Key pins: ``regions`` (residency) and ``deployments`` (allow-list), validated and carried end to end.

YAML compiler -> KeyRecord, admin changes -> config database rows -> snapshot
document -> KeyRecord (SQLite and PostgreSQL), rotation, apply of static
keys, and the router reading the record.
"""

from __future__ import annotations

import copy
import random
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from infra.postgres.server import PostgresServer
from proxy.control.apply import apply_tree
from proxy.control.changes import rotate_spec
from proxy.control.db.store import ConfigDB
from proxy.control.declarative import CONTROL_SECTIONS, compile_snapshot
from proxy.control.document import compile_document
from proxy.control.errors import ConfigRejected
from proxy.control.keys import mint_key
from proxy.control.problems import Problems
from proxy.control.service import ControlService
from proxy.routing.chain import key_deployments, key_regions
from proxy.routing.router import Needs, candidates
from proxy.snapshot import KeyRecord, hash_key

ROOT = Path(__file__).resolve().parents[3]
OPENAI, ANTHROPIC = "sim-openai-mumbai", "sim-anthropic-mumbai"


from tests.harness import without_standbys  # noqa: E402


def two_region_tree() -> dict:
    """The example config with the anthropic deployment moved to us-east-1 (not for confidential data)."""
    full = yaml.safe_load((ROOT / "examples" / "farebox.yaml").read_text())
    tree = without_standbys({k: v for k, v in full.items() if k in CONTROL_SECTIONS})
    for dep in tree["deployments"]:
        if dep["id"] == ANTHROPIC:
            dep["region"] = "us-east-1"
            dep["data_classes"] = ["public", "internal"]  # confidential must not fail over across regions
    return tree


def static_key(**extra) -> dict:
    minted = mint_key(team="platform", app="playground", aliases=["chat-default"], now_iso="2026-01-01T00:00:00Z")
    return {**minted.record, **extra}


def compile_tree(tree: dict, keys=()) -> tuple:
    problems = Problems()
    snap = compile_snapshot(tree, keys, problems=problems)
    return snap, problems.items


# -- the compiler --------------------------------------------------------------------------------


def test_key_pins_compile_to_frozensets() -> None:
    rec = static_key(regions=["ap-south-1"], deployments=[OPENAI])
    plain = static_key()
    snap, problems = compile_tree(two_region_tree(), [rec, plain])
    assert problems == []
    key = snap.keys[rec["hash"]]
    assert key.regions == frozenset({"ap-south-1"}) and key.deployments == frozenset({OPENAI})
    unpinned = snap.keys[plain["hash"]]
    assert unpinned.regions == frozenset() and unpinned.deployments == frozenset()
    assert key_regions(unpinned) is None and key_deployments(unpinned) is None
    assert key_regions(key) == {"ap-south-1"} and key_deployments(key) == {OPENAI}


def test_yaml_key_section_reads_pins_too() -> None:
    tree = two_region_tree()
    tree["keys"] = [static_key(regions=["us-east-1"])]
    snap, problems = compile_tree(tree)
    assert problems == []
    assert next(iter(snap.keys.values())).regions == frozenset({"us-east-1"})


def test_unknown_region_and_deployment_are_reported_with_paths() -> None:
    tree = two_region_tree()
    tree["keys"] = [static_key(regions=["ap-south-1", "eu-west-1"], deployments=["ghost", OPENAI])]
    _, problems = compile_tree(tree, [static_key(regions="ap-south-1", deployments=[3])])
    text = " | ".join(problems)
    assert "keys[0].regions[1]: no deployment is in region 'eu-west-1'" in text
    assert "keys[0].deployments[0]: unknown deployment 'ghost'" in text
    assert "stored keys[0].regions: must be a list of strings" in text
    assert "stored keys[0].deployments: must be a list of strings" in text
    assert "keys[0].regions[0]" not in text and "keys[0].deployments[1]" not in text


def test_null_and_empty_pins_mean_unrestricted() -> None:
    recs = [static_key(regions=None, deployments=None), static_key(regions=[], deployments=[])]
    snap, problems = compile_tree(two_region_tree(), recs)
    assert problems == []
    assert all(snap.keys[r["hash"]].regions == frozenset() == snap.keys[r["hash"]].deployments for r in recs)


def test_router_keeps_a_pinned_key_in_region_and_on_its_deployments() -> None:
    rec, only = static_key(regions=["ap-south-1"]), static_key(deployments=[ANTHROPIC])
    snap, _ = compile_tree(two_region_tree(), [rec, only])
    alias = snap.aliases["chat-default"]
    rng = random.Random(1)
    for _ in range(20):
        key = snap.keys[rec["hash"]]
        got = candidates(snap, alias, Needs((), "internal", 10, key_regions(key), key_deployments(key)), rng)
        assert [d.id for d in got] == [OPENAI]
        key = snap.keys[only["hash"]]
        got = candidates(snap, alias, Needs((), "internal", 10, key_regions(key), key_deployments(key)), rng)
        assert [d.id for d in got] == [ANTHROPIC]


# -- the config database ---------------------------------------------------------------------------


def _service(url: str) -> Iterator[ControlService]:
    db = ConfigDB(url)
    db.migrate()
    db.seed_once(apply_tree(two_region_tree(), db.now(), "bootstrap", None, []), "bootstrap")
    try:
        yield ControlService(db)
    finally:
        db.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def svc(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ControlService]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'control.sqlite'}"
    else:
        server: PostgresServer = request.getfixturevalue("postgres")
        url = server.create_database(f"pins_{request.node.name.split('[')[0][-40:]}")
    yield from _service(url)


def snapshot_of(svc: ControlService):  # type: ignore[no-untyped-def]
    version, _ = svc.db.head()
    return compile_document(svc.db.document(version), version)


async def test_pins_round_trip_through_the_database_and_rotation(svc: ControlService) -> None:
    view, plaintext = await svc.create_key("ops", {
        "team": "platform", "app": "playground", "aliases": ["chat-default"],
        "regions": ["ap-south-1", "ap-south-1"], "deployments": [OPENAI]})
    assert view["regions"] == ["ap-south-1"] and view["deployments"] == [OPENAI]
    key = snapshot_of(svc).keys[hash_key(plaintext)]
    assert key.regions == frozenset({"ap-south-1"}) and key.deployments == frozenset({OPENAI})
    listed = {k["id"]: k for k in await svc.list_keys()}
    assert listed[view["id"]]["regions"] == ["ap-south-1"] and listed[view["id"]]["deployments"] == [OPENAI]

    # rotation carries the pins over to the new key ...
    after, new_plain = await svc.rotate_key("ops", view["id"], 60)
    assert after["new"]["regions"] == ["ap-south-1"] and after["new"]["deployments"] == [OPENAI]
    new = snapshot_of(svc).keys[hash_key(new_plain)]
    assert new.regions == key.regions and new.deployments == key.deployments
    # ... unless the rotation gives new ones (an empty list clears a pin)
    after, newer_plain = await svc.rotate_key("ops", after["new"]["id"], 60,
                                              rotate_spec({"overlap_s": 5, "regions": ["us-east-1"],
                                                           "deployments": []}))
    newer = snapshot_of(svc).keys[hash_key(newer_plain)]
    assert newer.regions == frozenset({"us-east-1"}) and newer.deployments == frozenset()


async def test_unpinned_keys_keep_their_document_shape(svc: ControlService) -> None:
    view, plaintext = await svc.create_key("ops", {"team": "platform", "app": "playground",
                                                   "aliases": ["chat-default"]})
    assert view["regions"] == [] and view["deployments"] == []
    doc = svc.db.document(svc.db.head()[0])
    rec = next(k for k in doc["keys"] if k["id"] == view["id"])
    assert "regions" not in rec and "deployments" not in rec  # no new fields for keys that do not use them
    key = snapshot_of(svc).keys[hash_key(plaintext)]
    assert key.regions == frozenset() and key.deployments == frozenset()


async def test_bad_pins_are_rejected_with_paths_and_nothing_is_published(svc: ControlService) -> None:
    before = svc.db.head()
    with pytest.raises(ConfigRejected) as err:
        await svc.create_key("ops", {"team": "platform", "app": "playground", "aliases": ["chat-default"],
                                     "regions": ["ap-south-1", "mars-1"], "deployments": ["ghost"]})
    text = " | ".join(err.value.problems)
    assert "regions[1]: no deployment is in region 'mars-1'" in text
    assert "deployments[0]: unknown deployment 'ghost'" in text
    with pytest.raises(ConfigRejected) as err:
        await svc.create_key("ops", {"team": "platform", "app": "playground", "aliases": ["chat-default"],
                                     "regions": "ap-south-1"})
    assert "regions: must be a list of strings" in " | ".join(err.value.problems)
    with pytest.raises(ConfigRejected) as err:
        rotate_spec({"overlap_s": 1, "regions": [1], "colour": "blue"})
    assert any("colour: unknown field" in p for p in err.value.problems)
    assert svc.db.head() == before


async def test_a_pin_no_deployment_of_the_alias_satisfies_is_refused(svc: ControlService) -> None:
    with pytest.raises(ConfigRejected) as err:
        await svc.create_key("ops", {"team": "platform", "app": "playground", "aliases": ["embed-default"],
                                     "regions": ["us-east-1"]})
    assert any("alias 'embed-default' has no deployment within its region(s) ['us-east-1']" in p
               for p in err.value.problems)
    with pytest.raises(ConfigRejected) as err:
        await svc.create_key("ops", {"team": "platform", "app": "playground", "aliases": ["chat-default"],
                                     "regions": ["us-east-1"], "deployments": [OPENAI]})
    assert any("has no deployment within its region(s) ['us-east-1'] and deployment(s)" in p
               for p in err.value.problems)


async def test_apply_carries_static_key_pins_and_is_idempotent(svc: ControlService) -> None:
    tree = two_region_tree()
    rec = static_key(regions=["ap-south-1"], deployments=[OPENAI])
    tree["keys"] = [rec]
    diff, done = await svc.apply("ops", copy.deepcopy(tree))
    assert f"+ key {rec['id']}" in diff and done.changed
    key = snapshot_of(svc).keys[rec["hash"]]
    assert key.regions == frozenset({"ap-south-1"}) and key.deployments == frozenset({OPENAI})
    diff, again = await svc.apply("ops", copy.deepcopy(tree))
    assert diff == [] and not again.changed
    tree["keys"][0]["regions"] = ["us-east-1"]
    tree["keys"][0]["deployments"] = [ANTHROPIC]
    diff, _ = await svc.apply("ops", copy.deepcopy(tree))
    assert f"~ key {rec['id']}" in diff
    key = snapshot_of(svc).keys[rec["hash"]]
    assert key.regions == frozenset({"us-east-1"}) and key.deployments == frozenset({ANTHROPIC})


def test_key_record_defaults_are_empty() -> None:
    key = KeyRecord(key_id="fb-dev-x", key_hash="0" * 64, team="t", app="a", business_unit=None,
                    aliases=frozenset({"chat-default"}))
    assert key.regions == frozenset() and key.deployments == frozenset()
