"""A throwaway PostgreSQL server: Debian's ``postgresql`` package, ``initdb`` into a
temp dir, ``postgres`` on a free port as a plain child process (no system
service, no Docker). When run as root the cluster belongs to the ``postgres``
user (PostgreSQL refuses to run as root). Trust auth on 127.0.0.1 only.

    python -m infra.postgres.server ensure   # install postgresql if missing
    python -m infra.postgres.server run      # a throwaway server in the foreground

Tests use ``PostgresServer`` through a fixture and fail (never skip) when it
cannot start. ``stop``/``start`` keep the data directory: that is how a
config-database outage and its recovery are tested.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Self

from infra.process import ThrowawayService, apt_install, die_with_parent, free_port, service_main, stop_process


class PostgresServerError(RuntimeError):
    """PostgreSQL could not be installed, initialised, started or reached."""


def _bin_dir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).resolve().parent if initdb else None


def ensure_installed() -> Path:
    """The directory holding ``initdb`` and ``postgres``; ``apt-get install``s postgresql if needed."""
    apt_install("postgresql", _bin_dir, PostgresServerError)
    found = _bin_dir()
    assert found is not None
    return found


def _as_user() -> tuple[int, int] | None:
    """(uid, gid) to run as when we are root: postgres refuses to run as root."""
    if os.geteuid() != 0:
        return None
    try:
        pw = pwd.getpwnam("postgres")
    except KeyError:
        raise PostgresServerError("running as root and there is no 'postgres' user to run the server as") from None
    return pw.pw_uid, pw.pw_gid


class PostgresServer(ThrowawayService):
    """One ``postgres`` on 127.0.0.1; ``start``/``stop`` can be repeated and keep the data."""

    log_name = "postgres.log"

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self._bin = ensure_installed()
        self._user = _as_user()
        self._dir = Path(tempfile.mkdtemp(prefix="farebox-pg-"))
        self._data = self._dir / "data"
        self._proc: subprocess.Popen[bytes] | None = None
        if self._user:
            os.chown(self._dir, *self._user)
        self._run([str(self._bin / "initdb"), "-D", str(self._data), "-U", "postgres", "-A", "trust",
                   "-E", "UTF8", "--no-sync"])

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _preexec(self) -> None:
        die_with_parent()
        if self._user:
            os.setgid(self._user[1])
            os.setuid(self._user[0])

    def _run(self, args: list[str]) -> None:
        done = subprocess.run(args, capture_output=True, text=True, preexec_fn=self._preexec, check=False)  # noqa: PLW1509
        if done.returncode != 0:
            raise PostgresServerError(f"{args[0]} failed ({done.returncode}):\n{done.stdout[-1500:]}{done.stderr[-1500:]}")

    def start(self, timeout_s: float = 20.0) -> Self:
        if self.running:
            return self
        log = open(self._dir / "postgres.log", "ab")
        args = [str(self._bin / "postgres"), "-D", str(self._data), "-p", str(self.port), "-k", str(self._dir),
                "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
                "-c", "full_page_writes=off", "-c", "max_connections=50"]
        try:
            self._proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, preexec_fn=self._preexec)  # noqa: PLW1509
        finally:
            log.close()
        deadline = time.monotonic() + timeout_s
        while not self.ready():
            if self._proc.poll() is not None:
                raise PostgresServerError(f"postgres exited ({self._proc.returncode}){self._log()}")
            if time.monotonic() > deadline:
                self.stop()
                raise PostgresServerError(f"postgres on port {self.port} not ready in {timeout_s}s{self._log()}")
            time.sleep(0.05)
        return self

    def ready(self) -> bool:
        import psycopg

        try:
            with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="postgres",
                                 connect_timeout=1) as conn:
                conn.execute("SELECT 1")
            return True
        except psycopg.Error:
            return False

    def create_database(self, name: str) -> str:
        """A fresh database on this server; its SQLAlchemy URL."""
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="postgres",
                             autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        """Fast shutdown (SIGINT): clients are disconnected, the data stays."""
        proc, self._proc = self._proc, None
        stop_process(proc, sig=signal.SIGINT, timeout_s=15)


def main(argv: list[str]) -> int:
    return service_main(argv, ensure=ensure_installed, make=PostgresServer, name="postgres", doc=__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
