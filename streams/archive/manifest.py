"""The archive manifest: an append-only, hash-chained list of every archive file and its SHA-256.

``<root>/_manifest.jsonl`` holds one JSON entry per line::

    {"seq": 7, "at": "...", "action": "add"|"compact"|"expire", "source": "log",
     "extents": {"0": [first, last]},                  # add: the log batch the files hold
     "files": [{"path": "date=…/hour=…/part-….parquet", "sha256": "…", "bytes": n, "rows": n}],
     "removes": ["date=…/…parquet", …],                # compact / expire: files it replaces or drops
     "prev": "<hash of entry 6>", "hash": "<sha256 of this entry without 'hash', keys sorted>"}

Invariants:

* entries are only ever appended (under an exclusive ``flock`` on
  ``_manifest.lock``, so several archivers and ``farebox archive compact`` can
  share one root); no entry is edited and no file is edited in place;
* entry ``seq`` is 1, 2, 3 …, and ``prev`` is the previous entry's ``hash``
  (``GENESIS`` for the first): changing, inserting or dropping an entry breaks
  the chain at that entry;
* the live files are those added and not later removed; a later add of the
  same path (a batch rewritten after a crash) supersedes the earlier hash.

The chain shows any edit of history; a manifest rewritten as a whole with
fresh hashes, or cut short together with the files its last entries listed, is
caught by the anchored head: the last entry's hash (``Manifest.head``, printed
by ``farebox archive verify``, published by the archivers as the
``farebox_archive_head`` metric) kept by a second system and given back to
``farebox archive verify --expect-head H``, which fails unless that entry is
still in the chain.

A crash while appending leaves at most an incomplete last line (no newline);
the next writer drops it before appending (``repair``), and the files it would
have listed show as unlisted until their batch is rewritten and listed.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import orjson

MANIFEST = "_manifest.jsonl"
LOCK = "_manifest.lock"
HOUSEKEEPING_JOURNAL = "_journal/compact.json"  # present from before a compact/expire entry until its deletes are done
GENESIS = "0" * 64


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_entry(path: str, data: bytes, rows: int) -> dict[str, Any]:
    """How an entry lists one file: its path under the root, SHA-256, size and row count."""
    return {"path": path, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data), "rows": rows}


def entry_hash(entry: dict[str, Any]) -> str:
    """The hash an entry carries: SHA-256 of its canonical JSON without the ``hash`` field."""
    body = {k: v for k, v in entry.items() if k != "hash"}
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


@dataclass
class Replayed:
    """The manifest read back: the live files, the removed ones, and every problem with the chain."""

    entries: list[dict[str, Any]] = field(default_factory=list)
    live: dict[str, tuple[str, int]] = field(default_factory=dict)  # path -> (sha256, seq of the entry listing it)
    removed: dict[str, tuple[int, str | None]] = field(default_factory=dict)  # path -> (entry seq, last sha256)
    chain_problems: list[str] = field(default_factory=list)
    torn_tail: bool = False
    broken_at: int | None = None  # the first entry (seq) at which the chain breaks; None: it does not

    def _problem(self, n: int, text: str) -> None:
        self.chain_problems.append(text)
        if self.broken_at is None:
            self.broken_at = n

    @property
    def last_hash(self) -> str:
        return self.entries[-1]["hash"] if self.entries else GENESIS


def replay_manifest(text: bytes) -> Replayed:
    """Check the chain of ``text`` (the manifest file's bytes) and fold its entries into the live set."""
    out = Replayed()
    lines = text.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    elif lines:
        out.torn_tail = True
        lines.pop()
    prev = GENESIS
    for n, line in enumerate(lines, 1):
        try:
            entry = orjson.loads(line)
            if not isinstance(entry, dict):
                raise ValueError("not a JSON object")
        except ValueError as exc:
            out._problem(n, f"manifest entry {n} is not a valid entry ({exc}): chain broken")
            prev = ""
            continue
        if entry.get("seq") != n:
            out._problem(n, f"manifest entry {n} has seq {entry.get('seq')!r}: entries were "
                                      f"removed or inserted, chain broken")
        if entry.get("prev") != prev:
            out._problem(n, f"manifest entry {n} does not chain to the entry before it "
                                      f"(prev {str(entry.get('prev'))[:12]}… != {prev[:12] or '?'}…): chain broken")
        if entry.get("hash") != entry_hash(entry):
            out._problem(n, f"manifest entry {n} was edited (its hash does not match its content): "
                                      f"chain broken")
        prev = str(entry.get("hash"))
        out.entries.append(entry)
        for removed in entry.get("removes", ()):
            was = out.live.pop(removed, None)
            out.removed[removed] = (n, was[0] if was else None)
        for f in entry.get("files", ()):
            out.live[f["path"]] = (f["sha256"], n)
            out.removed.pop(f["path"], None)
    return out


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (created if needed), released on exit or when the process dies.

    Per open file: taking it twice in one thread deadlocks, so hold one lock per purpose."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


class Manifest:
    """The manifest of one archive root; ``append`` and ``locked`` are safe across processes."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.path = self.root / MANIFEST

    def locked(self) -> AbstractContextManager[None]:
        """Hold the root's manifest lock (see ``file_lock``)."""
        return file_lock(self.root / LOCK)

    def read(self) -> Replayed:
        try:
            return replay_manifest(self.path.read_bytes())
        except FileNotFoundError:
            return Replayed()

    def exists(self) -> bool:
        return self.path.exists()

    def relative(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def append(self, action: str, **fields: Any) -> dict[str, Any]:
        """Append one chained entry, taking the lock."""
        with self.locked():
            return self.append_locked(action, **fields)

    def append_locked(self, action: str, *, files: list[dict[str, Any]] | None = None,
                      removes: list[str] | None = None, now: datetime | None = None, **extra: Any) -> dict[str, Any]:
        """Append one chained entry; the caller holds ``locked()`` (flock is per open file: a nested
        ``locked`` in the same process would wait on itself). Reads only the last entry, not the whole file."""
        seq, prev = self.repair()
        entry: dict[str, Any] = {"seq": seq + 1,
                                 "at": (now or datetime.now(timezone.utc)).isoformat(timespec="microseconds"),
                                 "action": action, **extra, "files": files or [], "removes": removes or [],
                                 "prev": prev}
        entry["hash"] = entry_hash(entry)
        line = orjson.dumps(entry, option=orjson.OPT_SORT_KEYS) + b"\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)
        return entry

    def repair(self) -> tuple[int, str]:
        """Drop an incomplete last line left by a crash while appending (only ever the tail); the last
        entry's (seq, hash), or (0, GENESIS) when there is none. The caller holds the lock."""
        try:
            f = open(self.path, "r+b")
        except FileNotFoundError:
            return 0, GENESIS
        with f:
            size = f.seek(0, os.SEEK_END)
            line, good = _last_line(f, size)
            if good < size:
                f.truncate(good)
                f.flush()
                os.fsync(f.fileno())
        if not line:
            return 0, GENESIS
        try:
            last = orjson.loads(line)
            return int(last["seq"]), str(last["hash"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{self.path}: the last manifest entry is unreadable ({exc}); nothing appended — "
                             f"run `farebox archive verify`") from None

    def head(self) -> tuple[int, str]:
        """The last complete entry's (seq, hash), read from the end without the lock; (0, GENESIS) for none."""
        try:
            f = open(self.path, "rb")
        except FileNotFoundError:
            return 0, GENESIS
        with f:
            line, _ = _last_line(f, f.seek(0, os.SEEK_END))
        try:
            last = orjson.loads(line) if line else None
            return (int(last["seq"]), str(last["hash"])) if last else (0, GENESIS)
        except (ValueError, KeyError, TypeError):
            return 0, GENESIS  # unreadable: verify says why

    def last_entry_of(self, source: str) -> dict[str, Any] | None:
        """The newest entry written by ``source``, read backwards from the end (recovery: is the journaled
        batch, always that source's newest, already listed?)."""
        needle = b'"source":' + orjson.dumps(source)
        try:
            f = open(self.path, "rb")
        except FileNotFoundError:
            return None
        with f:
            for line in _lines_backwards(f, f.seek(0, os.SEEK_END)):
                if needle in line:
                    try:
                        return orjson.loads(line)
                    except ValueError:
                        continue
        return None

    def removed_paths(self) -> set[str]:
        """The paths some entry removed (compaction, retention), without checking the chain: what readers
        skip. A removed path is never listed again (outputs are named by content; a batch is rewritten
        only while unlisted), so only entries that remove something are parsed."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return set()
        removed: set[str] = set()
        for line in data.splitlines():
            if b'"removes":[]' not in line:
                try:
                    removed.update(orjson.loads(line).get("removes", ()))
                except (ValueError, AttributeError):  # torn or tampered: verify reports it
                    continue
        return removed


def _lines_backwards(f: Any, size: int) -> Iterator[bytes]:
    """The complete (newline-ended) lines of an open file, last first; a torn tail is skipped."""
    buf, pos, tail_found = b"", size, False
    while pos > 0:
        step = min(1 << 20, pos)
        pos -= step
        f.seek(pos)
        buf = f.read(step) + buf
        if not tail_found:
            end = buf.rfind(b"\n")
            if end < 0:
                continue
            buf, tail_found = buf[: end + 1], True
        lines = buf.split(b"\n")  # [partial or first line, complete lines..., b""]
        yield from reversed(lines[1:-1])
        buf = lines[0] + b"\n"
    if tail_found and buf != b"\n":
        yield buf[:-1]


def _last_line(f: Any, size: int) -> tuple[bytes, int]:
    """The last complete (newline-ended) line of an open file, and the length up to its end."""
    buf, pos = b"", size
    while pos > 0:
        step = min(1 << 16, pos)
        pos -= step
        f.seek(pos)
        buf = f.read(step) + buf
        end = buf.rfind(b"\n")
        if end < 0:
            continue
        start = buf.rfind(b"\n", 0, end)
        if start >= 0 or pos == 0:
            return buf[start + 1:end], pos + end + 1
    return b"", 0


# --- verification ------------------------------------------------------------------------


@dataclass
class Verdict:
    """What ``verify`` found: ``problems`` (tampering, loss, a broken chain) fail it; ``notes`` do not."""

    root: Path
    files: int = 0
    entries: int = 0
    head: str = GENESIS  # the last entry's hash: record it elsewhere to detect a rewritten or cut manifest
    head_seq: int = 0
    empty: bool = False
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def intact(self) -> bool:
        return not self.empty and not self.problems


def verify(root: str | Path, expect_head: str | None = None) -> Verdict:
    """Check the chain, every listed file's SHA-256, and that every Parquet file on disk is listed; with
    ``expect_head`` (a head published earlier and kept elsewhere), that its entry is still in the chain.

    Names each changed, missing or unlisted file. A file whose removal is
    recorded (compaction, retention) but which is still on disk (a crash
    before the delete; the next compaction deletes it) is a note while its
    hash is the one listed, and a problem otherwise. The manifest may have
    grown since ``expect_head`` (a note says by how much); an ``expect_head``
    that no entry carries means entries were cut off or rewritten.
    """
    root = Path(root)
    verdict = Verdict(root)
    state = Manifest(root).read()
    on_disk = {p.relative_to(root).as_posix() for p in root.rglob("*.parquet")} if root.is_dir() else set()
    verdict.entries, verdict.files, verdict.head = len(state.entries), len(state.live), state.last_hash
    verdict.head_seq = len(state.entries)
    if not state.entries and not on_disk and not state.torn_tail:
        verdict.empty = True
        return verdict
    verdict.problems += state.chain_problems
    if expect_head is not None:
        at = next((n for n, e in enumerate(state.entries, 1) if e.get("hash") == expect_head), None)
        if at is None:
            verdict.problems.append(f"the expected head {expect_head[:16]}… is in no manifest entry: entries were "
                                    f"cut off or the manifest was rewritten since it was published")
        elif at < len(state.entries):
            verdict.notes.append(f"the expected head is entry {at}; the manifest has grown by "
                                 f"{len(state.entries) - at} entr{'y' if len(state.entries) - at == 1 else 'ies'} "
                                 f"since")
    if state.torn_tail:
        verdict.notes.append("the manifest ends in an incomplete entry (a crash while appending); "
                             "the next archiver run drops it")
    for path, (sha, seq) in sorted(state.live.items()):
        file = root / path
        if not file.exists():
            verdict.problems.append(f"missing: {path} (listed in manifest entry {seq})")
        elif (actual := sha256_file(file)) != sha:
            verdict.problems.append(f"changed: {path} (SHA-256 {actual[:16]}…, manifest entry {seq} "
                                    f"lists {sha[:16]}…)")
    for path in sorted(on_disk - state.live.keys()):
        if path in state.removed:
            seq, sha = state.removed[path]
            if sha is not None and sha256_file(root / path) == sha:
                verdict.notes.append(f"superseded: {path} (removed by manifest entry {seq}; "
                                     f"deleted at the next compaction)")
                continue
            verdict.problems.append(f"changed: {path} (removed by manifest entry {seq}, and not the file "
                                    f"that was removed)")
        else:
            verdict.problems.append(f"unlisted: {path} (in no manifest entry)")
    return verdict


def state_path_of(root: str | Path) -> Path:
    """Where embedded mode keeps the last archived log offset (``archive_from_log`` commits it)."""
    return Path(root) / "_state" / "log.json"


def committed_offset(state: Path) -> int:
    """The last log offset recorded in the embedded archive's state file ``state`` (0: no file yet)."""
    try:
        return int(orjson.loads(state.read_bytes())["last_offset"])
    except FileNotFoundError:
        return 0


def archived_offset(root: str | Path) -> int:
    """The last log offset the embedded archive at ``root`` has committed (0: none). Here, beside the manifest,
    so the gateway's archiver schedule reads it without importing the Parquet writer."""
    return committed_offset(state_path_of(root))
