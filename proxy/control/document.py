"""The snapshot document: what the control plane publishes and every pod compiles.

A document is plain JSON (the declarative control tree, price versions,
key and admin-token *hashes*), never a secret: deployments name their
provider key (``api_key_env``), they do not hold it. Its content hash is the
SHA-256 of its canonical JSON; the version is the config database's counter.
Pods compile a document into the immutable ``Snapshot`` with the same
validating compiler as ``farebox.yaml`` and keep the last good one on disk
(``last_good``) so they can start and serve while the database is down.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

import orjson

from proxy.control.declarative import compile_snapshot
from proxy.control.problems import ConfigError, Problems
from proxy.snapshot import Snapshot

DOC_SECTIONS = ("control", "prices", "keys", "admin_tokens")
LAST_GOOD = "snapshot.json"


def content_hash(doc: Mapping[str, Any]) -> str:
    body = {k: doc.get(k) for k in DOC_SECTIONS}
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


def compile_document(doc: Mapping[str, Any], version: int, problems: Problems | None = None) -> Snapshot:
    """The hot-path snapshot for ``doc``; raises ConfigError listing every problem."""
    own = problems if problems is not None else Problems()
    snap = compile_snapshot(
        doc.get("control") or {},
        doc.get("keys") or (),
        (),
        doc.get("admin_tokens") or (),
        price_versions=doc.get("prices") or (),
        problems=own,
    )
    own.raise_if_any("snapshot")
    assert snap is not None
    return replace(snap, version=version, content_hash=content_hash(doc))


def save_last_good(folder: Path, version: int, doc: Mapping[str, Any]) -> None:
    """Atomically replace ``folder/snapshot.json`` (write, fsync, rename)."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / LAST_GOOD
    tmp = target.with_suffix(f".tmp{os.getpid()}")
    data = orjson.dumps({"version": version, "content_hash": content_hash(doc), "document": doc},
                        option=orjson.OPT_SORT_KEYS)
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, target)


def load_last_good(folder: Path) -> tuple[int, dict[str, Any]] | None:
    """The saved (version, document), or None; a file whose hash does not match is refused."""
    path = folder / LAST_GOOD
    if not path.exists():
        return None
    saved = orjson.loads(path.read_bytes())
    doc = saved["document"]
    if content_hash(doc) != saved.get("content_hash"):
        raise ConfigError([f"{path}: content hash mismatch, the file is damaged"], str(path))
    return int(saved["version"]), doc
