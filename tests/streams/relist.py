"""Listing a file the way a writer would (a uniquely named test helper module): an ``add`` entry with its bytes'
SHA-256, so the manifest vouches for it as it is now (a newer writer's file, or a writer that listed a bad file)."""

from __future__ import annotations

from pathlib import Path

from streams.archive.manifest import Manifest, file_entry


def relist(root: Path, path: Path) -> None:
    manifest = Manifest(root)
    manifest.append("add", source="relist", files=[file_entry(manifest.relative(path), path.read_bytes(), 0)])
