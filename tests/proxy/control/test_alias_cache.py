"""An alias's ``cache.semantic``: read from YAML and from the admin API's alias body, every problem listed,
shown by ``GET /admin/v1/aliases``, checked by ``farebox config check``."""

from __future__ import annotations

import copy
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
import yaml

from proxy.cache.similarity import DEFAULT_THRESHOLD
from proxy.control.alias_cache import semantic_view
from proxy.control.apply import apply_tree
from proxy.control.db.store import ConfigDB
from proxy.control.declarative import CONTROL_SECTIONS, compile_snapshot
from proxy.control.document import compile_document
from proxy.control.errors import ConfigRejected
from proxy.control.problems import Problems
from proxy.control.service import ControlService
from proxy.snapshot import SemanticCache

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "farebox.yaml"
FAQ = {"name": "chat-faq", "kind": "chat", "deployments": ["sim-openai-mumbai"],
       "cache": {"exact": True, "semantic": {"embeddings_alias": "embed-default", "threshold": "0.95",
                                             "ttl_s": 600}}}


@pytest.fixture
def tree() -> dict:
    full = yaml.safe_load(EXAMPLE.read_text())
    return {k: v for k, v in full.items() if k in CONTROL_SECTIONS}


def compiled(tree: dict):  # type: ignore[no-untyped-def]
    problems = Problems()
    return compile_snapshot(tree, problems=problems), problems.items


def test_a_semantic_cache_is_read_with_its_defaults(tree: dict) -> None:
    tree["aliases"] += [FAQ, {"name": "chat-faq-2", "kind": "chat", "deployments": ["sim-openai-mumbai"],
                              "cache": {"semantic": {"embeddings_alias": "embed-default"}}}]
    snap, problems = compiled(tree)
    assert problems == []
    faq, faq2 = snap.aliases["chat-faq"], snap.aliases["chat-faq-2"]
    assert faq.cache and faq.semantic == SemanticCache("embed-default", Decimal("0.95"), 600)
    assert not faq2.cache and faq2.semantic == SemanticCache("embed-default", DEFAULT_THRESHOLD, 86_400)
    assert snap.aliases["chat-default"].semantic is None
    assert semantic_view(faq.semantic) == {"embeddings_alias": "embed-default", "threshold": "0.95", "ttl_s": 600}


def test_the_semantic_settings_are_in_the_snapshot_hash(tree: dict) -> None:
    tree["aliases"].append(copy.deepcopy(FAQ))
    before, _ = compiled(tree)
    tree["aliases"][-1]["cache"]["semantic"]["threshold"] = "0.96"
    after, _ = compiled(tree)
    assert before.content_hash != after.content_hash


def test_every_semantic_problem_is_listed_at_once(tree: dict) -> None:
    def alias(name: str, semantic: object, kind: str = "chat") -> dict:
        deps = ["sim-openai-mumbai"] if kind == "chat" else ["sim-embed-mumbai"]
        return {"name": name, "kind": kind, "deployments": deps, "cache": {"semantic": semantic}}

    tree["aliases"] += [
        alias("a-unknown", {"embeddings_alias": "ghost"}),
        alias("a-chat", {"embeddings_alias": "chat-default"}),
        alias("a-number", {"embeddings_alias": "embed-default", "threshold": 0.9}),
        alias("a-range", {"embeddings_alias": "embed-default", "threshold": "1.5"}),
        alias("a-places", {"embeddings_alias": "embed-default", "threshold": "0.91234"}),
        alias("a-ttl", {"embeddings_alias": "embed-default", "ttl_s": 0}),
        alias("a-typo", {"embeddings_alias": "embed-default", "treshold": "0.9"}),
        alias("a-missing", {"threshold": "0.9"}),
        alias("a-shape", True),
        alias("e-embed", {"embeddings_alias": "embed-default"}, kind="embeddings"),
    ]
    snap, problems = compiled(tree)
    assert snap is None
    joined = "\n".join(problems)
    for fragment in (
        "aliases.a-unknown.cache.semantic.embeddings_alias: unknown alias 'ghost'",
        "aliases.a-chat.cache.semantic.embeddings_alias: alias 'chat-default' is of kind chat, not embeddings",
        "aliases[4].cache.semantic.threshold: must be a decimal string",
        "aliases[5].cache.semantic.threshold: must be above 0 and at most 1",
        "aliases[6].cache.semantic.threshold: must have at most 4 decimal places",
        "aliases[7].cache.semantic.ttl_s: must be >= 1",
        "aliases[8].cache.semantic.treshold: unknown field",
        "aliases[9].cache.semantic.embeddings_alias: is required",
        "aliases[10].cache.semantic: expected a mapping",
        "aliases[11].cache.semantic: only chat aliases have a semantic cache",
    ):
        assert fragment in joined, (fragment, joined)


@pytest.fixture
def svc(tmp_path: Path, tree: dict):  # type: ignore[no-untyped-def]
    db = ConfigDB(f"sqlite:///{tmp_path / 'control.sqlite'}")
    db.migrate()
    db.seed_once(apply_tree(tree, db.now(), "bootstrap", None, []), "bootstrap")
    yield ControlService(db)
    db.close()


async def test_the_admin_api_stores_a_semantic_cache_in_the_alias_and_refuses_a_bad_one(svc: ControlService) -> None:
    body = {k: v for k, v in FAQ.items() if k != "name"}
    after = await svc.put_alias("ops", "chat-faq", body)
    assert after["cache"]["semantic"]["threshold"] == "0.95"
    version, _ = svc.db.head()
    snap = compile_document(svc.db.document(version), version)
    assert snap.aliases["chat-faq"].semantic == SemanticCache("embed-default", Decimal("0.95"), 600)
    bad = copy.deepcopy(body)
    bad["cache"]["semantic"].update(embeddings_alias="chat-default", threshold="0")
    with pytest.raises(ConfigRejected) as err:
        await svc.put_alias("ops", "chat-faq", bad)
    text = " | ".join(err.value.problems)
    assert "is of kind chat, not embeddings" in text and "must be above 0" in text
    assert svc.db.head()[0] == version  # nothing published


def test_config_check_names_a_bad_semantic_cache(tmp_path: Path) -> None:
    full = yaml.safe_load(EXAMPLE.read_text())
    full["secrets_file"] = str(ROOT / "examples" / "secrets.env")
    full["state_dir"] = str(tmp_path)
    full["aliases"].append({**FAQ, "cache": {"semantic": {"embeddings_alias": "nope", "threshold": "2"}}})
    path = tmp_path / "farebox.yaml"
    path.write_text(yaml.safe_dump(full))
    res = subprocess.run([sys.executable, "-m", "farebox", "config", "check", str(path)],
                         capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 2
    assert "aliases.chat-faq.cache.semantic.embeddings_alias: unknown alias 'nope'" in res.stderr
    assert "aliases[2].cache.semantic.threshold: must be above 0 and at most 1" in res.stderr
