"""A throwaway ``redis-server``: installed from Debian when missing, started on a
free port with no persistence in a temp dir, ready when it answers PING.

    python -m infra.redis.server ensure      # install redis-server if missing
    python -m infra.redis.server run         # a throwaway server in the foreground

Tests use ``RedisServer`` through a session fixture and fail (never skip) when
it cannot start. ``pause``/``resume`` (SIGSTOP/SIGCONT) make a server that
accepts connections but never answers, which is how timeouts are tested.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Self


class RedisServerError(RuntimeError):
    """redis-server could not be installed, started or reached."""


def ensure_installed() -> str:
    """The path of ``redis-server``; ``apt-get install``s it (after ``apt-get update`` if needed)."""
    found = shutil.which("redis-server")
    if found:
        return found
    if shutil.which("apt-get") is None:
        raise RedisServerError("redis-server is not installed and apt-get is not available")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "--no-install-recommends", "redis-server"]
    if subprocess.run(install, env=env, capture_output=True, check=False).returncode != 0:
        subprocess.run(["apt-get", "update"], env=env, capture_output=True, check=False)
        done = subprocess.run(install, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RedisServerError(f"apt-get install redis-server failed:\n{done.stderr[-2000:]}")
    found = shutil.which("redis-server")
    if not found:
        raise RedisServerError("redis-server still not on PATH after apt-get install")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ping(port: int, timeout_s: float = 0.2) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def _die_with_parent() -> None:
    """In the child: get SIGTERM when the parent dies, so a killed test run leaves no server."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class RedisServer:
    """One redis-server process on 127.0.0.1; ``start``/``stop`` can be repeated on the same port."""

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
            args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=_die_with_parent  # noqa: PLW1509 (no threads at start-up)
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
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)  # a paused server cannot handle SIGTERM
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stderr:
            proc.stderr.close()

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    def _log(self) -> str:
        path = self._dir / "redis.log"
        return "\n" + path.read_text()[-2000:] if path.exists() else ""


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "run"
    if command == "ensure":
        print(ensure_installed())
        return 0
    if command == "run":
        signal.signal(signal.SIGTERM, _interrupt)
        with RedisServer() as server:
            print(f"redis-server ready at {server.url} (Ctrl-C stops it)", flush=True)
            try:
                while server.running:
                    time.sleep(0.5)
            except KeyboardInterrupt:
                pass
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
