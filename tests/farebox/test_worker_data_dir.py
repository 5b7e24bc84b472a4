"""``farebox worker`` with its data folder's parents missing: created, or a clear exit naming the setting."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from farebox.settings import load_settings
from farebox.worker import build_worker, ensure_data_dir

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _config(folder: Path) -> Path:
    """examples/farebox.yaml copied into ``folder`` as written (state in ``var/`` beside it, not created yet)."""
    tree = yaml.safe_load((EXAMPLES / "farebox.yaml").read_text())
    tree["event_log"]["path"] = "var/events.sqlite"
    tree["state_dir"] = "var"
    tree["secrets_file"] = str(EXAMPLES / "secrets.env")
    tree["mode"] = "distributed"
    tree["distributed"] = {"bootstrap": "127.0.0.1:1", "redis_url": "redis://127.0.0.1:1/0"}
    path = folder / "farebox.yaml"
    path.write_text(yaml.safe_dump(tree, sort_keys=False))
    return path


def test_worker_creates_its_data_folder_beside_the_config(tmp_path: Path) -> None:
    settings = load_settings(_config(tmp_path))
    assert not (tmp_path / "var").exists()
    build_worker(settings)  # builds the Faust app; nothing connects to Kafka until it runs
    assert (tmp_path / "var" / "worker").is_dir()
    assert Path(settings.distributed.worker_data_dir) == tmp_path / "var" / "worker"


def test_a_data_folder_that_cannot_be_made_is_a_clear_exit(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the folder's parent should be")
    with pytest.raises(SystemExit) as exc:
        ensure_data_dir(blocker / "worker")
    message = str(exc.value)
    assert message.startswith("error: distributed.worker_data_dir: cannot create ")
    assert str(blocker / "worker") in message
    shutil.rmtree(tmp_path, ignore_errors=True)
