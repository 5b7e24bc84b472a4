"""This process's private Unix socket: where its batch runner reaches its own gateway.

One per process (``serve --workers N`` runs N gateways, each with its own), in a fresh directory only the
process's user may enter (mode 0700), removed at exit. ``farebox.wiring.serve`` listens on it beside the
public port; the batch runner (``proxy.batches.runner``) sends its lines to it.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile
from pathlib import Path


@functools.cache
def internal_socket() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="farebox-"))  # created 0700
    atexit.register(shutil.rmtree, folder, True)
    return folder / f"gw-{os.getpid()}.sock"
