"""What every throwaway service process needs (Redis, PostgreSQL, Kafka).

Installing a Debian package when its binary is missing, a free loopback port,
tying the child's life to ours, stopping it politely then firmly, and the
``run`` loop of each service's command line. The services differ only in how
they start and how they tell they are ready; that stays in their modules.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, ContextManager, Protocol, Self


def apt_install(package: str, found: Callable[[], object], error: type[Exception]) -> None:
    """``apt-get install`` a package (after ``apt-get update`` if the first try fails) unless ``found()``."""
    if found():
        return
    if shutil.which("apt-get") is None:
        raise error(f"{package} is not installed and apt-get is not available")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "--no-install-recommends", package]
    if subprocess.run(install, env=env, capture_output=True, check=False).returncode != 0:
        subprocess.run(["apt-get", "update"], env=env, capture_output=True, check=False)
        done = subprocess.run(install, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise error(f"apt-get install {package} failed:\n{done.stderr[-2000:]}")
    if not found():
        raise error(f"{package} still not found after apt-get install")


LISTEN_PORTS = 12_000  # how many ports below the ephemeral range ``free_port`` chooses among
_RANDOM = random.SystemRandom()
_HANDED: dict[int, None] = {}  # the ports this process chose lately (insertion order; the last 1,000)


def ephemeral_low(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> int:
    """The lowest port the kernel hands out for ``bind(0)`` and outgoing connections (Linux's default 32768)."""
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A loopback port nothing is bound to now, for a server about to start on it.

    Chosen at random below the ephemeral range, not by ``bind(0)``: a port from that range can be taken, between
    this check and the server's bind, by any outgoing connection or ``bind(0)`` on the machine (a test run opens
    thousands: Kafka clients, HTTP pools), and the server then fails with "address already in use". Below the
    range only another explicit choice can collide: a port bound now is skipped, and so is one this process
    chose lately (a stack asks for several before starting any)."""
    low = ephemeral_low()
    first = max(1024, low - LISTEN_PORTS)
    if low - first < 1000:  # an unusual range leaves no room below it: the kernel's choice
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]
    for _ in range(500):
        port = _RANDOM.randrange(first, low)
        if port in _HANDED:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED[port] = None
        if len(_HANDED) > 1000:
            del _HANDED[next(iter(_HANDED))]
        return port
    raise RuntimeError(f"no free loopback port in {first}-{low - 1} after 500 tries")


def die_with_parent() -> None:
    """``preexec_fn``: the child gets SIGTERM when its parent goes, so a killed test run leaves no server.

    Linux sends it when the *thread* that forked exits, not the process: start
    long-lived servers from the main thread (or one long-lived thread).
    """
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def stop_process(proc: subprocess.Popen | None, *, sig: int = signal.SIGTERM, timeout_s: float = 5.0) -> None:
    """Send ``sig`` (after SIGCONT, in case it was paused), wait, then SIGKILL."""
    if proc is None:
        return
    if proc.poll() is None:
        proc.send_signal(signal.SIGCONT)
        proc.send_signal(sig)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for stream in (proc.stdout, proc.stderr):
        if stream:
            stream.close()


class ThrowawayService:
    """A server process whose files live in a temp dir (``_dir``); subclasses start and stop it."""

    log_name = "server.log"
    _dir: Path

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    def _log(self) -> str:
        """The end of the server's own log, for error messages."""
        path = self._dir / self.log_name
        return "\n" + path.read_text(errors="replace")[-2000:] if path.exists() else ""


class Service(Protocol):
    @property
    def url(self) -> str: ...

    @property
    def running(self) -> bool: ...


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def serve_forever(make: Callable[[], ContextManager[Service]], name: str) -> int:
    """The ``run`` command: a throwaway service in the foreground until Ctrl-C or SIGTERM."""
    signal.signal(signal.SIGTERM, _interrupt)
    with make() as server:
        print(f"{name} ready at {server.url} (Ctrl-C stops it)", flush=True)
        try:
            while server.running:
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
    return 0


def service_main(
    argv: list[str], *, ensure: Callable[[], object], make: Callable[[], ContextManager[Service]], name: str,
    doc: str | None,
) -> int:
    """A service module's command line: ``ensure`` (install only) or ``run`` (the default)."""
    command = argv[0] if argv else "run"
    if command == "ensure":
        print(ensure())
        return 0
    if command == "run":
        return serve_forever(make, name)
    print(doc or "", file=sys.stderr)
    return 2
