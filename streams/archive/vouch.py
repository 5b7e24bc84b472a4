"""The archive files the manifest vouches for: what every reader reads, and nothing else.

A file is vouched for when the manifest lists it live (added and not removed
since) in an entry before any break in the chain, and its SHA-256 is the one
listed. Everything else under the archive's data folders is left out of every
reader (the warehouse views, FOCUS, re-rating, what-if, reconciliation,
replay) and named in a warning: a file no entry lists (dropped in by hand or by
a forged export), one whose bytes changed (a rewritten row), one listed only
after the chain breaks. A listed file that is gone is a warning too (its rows
are lost; ``farebox archive verify`` fails on it). A file whose removal the
manifest records (compaction, retention, awaiting its delete) is skipped
silently, as before.

What this does not catch alone: a forged file *and* a forged manifest entry
appended after the real head, chained correctly (the chain has no secret).
That is what the anchored head is for: ``farebox archive verify --expect-head``
against the head a second system kept (``streams.archive.anchor``).

Hashing once. Each file's SHA-256 is remembered by its identity (size,
modification time, inode change time, inode): in memory for the process, and in
a per-user cache outside the archive (``$FAREBOX_CACHE_DIR``, else
``~/.cache/farebox``, ``vouched/<digest of the root path>.json``), so a cold
report hashes only the files it has not seen. The change time cannot be set by
a user (any write or ``touch`` moves it), so a rewritten file is always hashed
again; the cache lives outside the archive, so whoever can write the archive
cannot write what it vouches for. A cache that cannot be read or written is
ignored: the files are hashed.
"""

from __future__ import annotations

import hashlib
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from streams.archive.manifest import GENESIS, Manifest, sha256_file

DATA_GLOB = "date=*/**/*.parquet"
SUMMARY_GLOB = "summary/*.parquet"

Identity = tuple[int, int, int, int]  # size, mtime_ns, ctime_ns, inode


@dataclass(frozen=True, slots=True)
class Vouched:
    """The files of one archive root the manifest vouches for, and what was left out or is missing."""

    root: Path
    files: tuple[Path, ...]  # vouched data files (``date=…``), in name order
    summary: frozenset[str]  # vouched files under ``summary/``, as paths under the root
    warnings: tuple[str, ...] = ()  # one line per file left out or missing, naming it
    head: str = GENESIS  # the manifest's last entry hash
    left_out: int = 0  # files on disk left out of every reader (unlisted, changed, after a break)

    def relative(self) -> set[str]:
        return {p.relative_to(self.root).as_posix() for p in self.files}


@dataclass
class _HashCache:
    """SHA-256 by file identity, for one archive root: memory first, then the per-user cache file."""

    path: Path | None
    known: dict[str, tuple[Identity, str]] = field(default_factory=dict)
    dirty: bool = False

    @classmethod
    def load(cls, root: Path) -> _HashCache:
        folder = Path(os.environ.get("FAREBOX_CACHE_DIR") or Path.home() / ".cache" / "farebox") / "vouched"
        path = folder / (hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:24] + ".json")
        cache = cls(path)
        try:
            for rel, (size, mtime, ctime, ino, sha) in orjson.loads(path.read_bytes()).items():
                cache.known[rel] = ((int(size), int(mtime), int(ctime), int(ino)), str(sha))
        except (OSError, ValueError, TypeError):
            cache.known.clear()  # no cache, or not ours to trust: hash again
        return cache

    def sha256(self, rel: str, file: Path, identity: Identity) -> str:
        hit = self.known.get(rel)
        if hit is not None and hit[0] == identity:
            return hit[1]
        sha = sha256_file(file)
        self.known[rel] = (identity, sha)
        self.dirty = True
        return sha

    def save(self, present: set[str]) -> None:
        if not self.dirty or self.path is None:
            return
        body = {rel: [*ident, sha] for rel, (ident, sha) in self.known.items() if rel in present}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(orjson.dumps(body))
            os.replace(tmp, self.path)
            self.dirty = False
        except OSError:
            pass  # a read-only home: hash again next time


_CACHES: dict[Path, _HashCache] = {}
_LOCK = threading.Lock()


def _identity(path: Path) -> Identity | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino


def vouched(root: str | Path) -> Vouched:
    """Replay the manifest and check every data and summary file on disk against it (hashing each file only
    when its identity is new); see the module docstring."""
    root = Path(root)
    state = Manifest(root).read()
    broken = state.broken_at
    on_disk = sorted({*root.glob(DATA_GLOB), *root.glob(SUMMARY_GLOB)}) if root.is_dir() else []
    with _LOCK:
        cache = _CACHES.get(root)
        if cache is None:
            cache = _CACHES[root] = _HashCache.load(root)
        files: list[Path] = []
        summary: set[str] = set()
        warnings: list[str] = []
        present: set[str] = set()
        for path in on_disk:
            rel = path.relative_to(root).as_posix()
            identity = _identity(path)
            if identity is None:
                continue  # removed while listing (compaction, retention)
            present.add(rel)
            listed = state.live.get(rel)
            if listed is None:
                if rel not in state.removed:
                    warnings.append(f"unlisted: {rel} (in no manifest entry): left out")
                continue
            sha, seq = listed
            if broken is not None and seq >= broken:
                warnings.append(f"after the break: {rel} (listed in manifest entry {seq}, at or after the entry "
                                f"{broken} where the chain breaks): left out")
                continue
            if cache.sha256(rel, path, identity) != sha:
                warnings.append(f"changed: {rel} (its SHA-256 is not the one manifest entry {seq} lists): left out")
                continue
            if rel.startswith("summary/"):
                summary.add(rel)
            else:
                files.append(path)
        cache.save(present)
    left_out = len(warnings)
    for rel, (_, seq) in sorted(state.live.items()):
        if rel not in present:
            warnings.append(f"missing: {rel} (listed in manifest entry {seq}, not on disk)")
    if state.chain_problems:
        warnings.insert(0, f"the manifest does not chain: {state.chain_problems[0]}")
    return Vouched(root, tuple(files), frozenset(summary), tuple(warnings), state.last_hash, left_out)
