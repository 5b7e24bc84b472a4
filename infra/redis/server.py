"""A throwaway ``redis-server``: installed from Debian when missing, started on a
free port with no persistence in a temp dir, ready when it answers PING.

    python -m infra.redis.server ensure      # install redis-server if missing
    python -m infra.redis.server run         # a throwaway server in the foreground

Tests use ``RedisServer`` through a session fixture and fail (never skip) when
it cannot start. ``pause``/``resume`` (SIGSTOP/SIGCONT) make a server that
accepts connections but never answers, which is how timeouts are tested.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Self

from infra.process import ThrowawayService, apt_install, die_with_parent, free_port, service_main, stop_process


class RedisServerError(RuntimeError):
    """redis-server could not be installed, started or reached."""


def ensure_installed() -> str:
    """The path of ``redis-server``; ``apt-get install``s it when missing."""
    apt_install("redis-server", lambda: shutil.which("redis-server"), RedisServerError)
    return shutil.which("redis-server") or ""


def ping(port: int, timeout_s: float = 0.2) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer(ThrowawayService):
    """One redis-server process on 127.0.0.1; ``start``/``stop`` can be repeated on the same port."""

    log_name = "redis.log"

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self._binary = ensure_installed()
        self._dir = Path(tempfile.mkdtemp(prefix="farebox-redis-"))
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout_s: float = 10.0) -> Self:
        if self.running:
            return self
        args = [
            self._binary, "--port", str(self.port), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no", "--dir", str(self._dir),
            "--daemonize", "no", "--logfile", str(self._dir / "redis.log"),
        ]
        self._proc = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=die_with_parent  # noqa: PLW1509 (no threads at start-up)
        )
        deadline = time.monotonic() + timeout_s
        while not ping(self.port):
            if self._proc.poll() is not None:
                err = self._proc.stderr.read().decode() if self._proc.stderr else ""
                raise RedisServerError(f"redis-server exited ({self._proc.returncode}): {err}{self._log()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RedisServerError(f"redis-server on port {self.port} did not answer PING{self._log()}")
            time.sleep(0.01)
        return self

    def pause(self) -> None:
        """SIGSTOP: connections are still accepted by the kernel, nothing is answered."""
        assert self._proc is not None
        self._proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self._proc is not None
        self._proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        stop_process(proc)  # SIGCONT first: a paused server cannot handle SIGTERM


def main(argv: list[str]) -> int:
    return service_main(argv, ensure=ensure_installed, make=RedisServer, name="redis-server", doc=__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
