"""Redis and PostgreSQL for ``farebox dev cluster``: detached processes whose data stays in the cluster's folder.

Unlike ``infra.redis.server`` / ``infra.postgres.server`` (throwaway servers
tied to a test run), these outlive the command that started them: each runs
in its own session and is handed to ``record(name, pid, match, signal)`` the
moment it starts, so a later ``down`` (or a failed ``up``) stops it. Both
come from Debian packages, installed when missing.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable

from infra.postgres.server import PostgresServerError, _as_user
from infra.postgres.server import ensure_installed as ensure_postgres
from infra.redis.server import RedisServerError, ping
from infra.redis.server import ensure_installed as ensure_redis

Record = Callable[..., None]


def _wait(ready: Callable[[], bool], proc: subprocess.Popen, what: str, log: Path, timeout_s: float,
          error: type[Exception]) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        if proc.poll() is not None:
            raise error(f"{what} exited ({proc.returncode}): {_tail(log)}")
        if time.monotonic() > deadline:
            raise error(f"{what} not ready in {timeout_s:.0f}s: {_tail(log)}")
        time.sleep(0.05)


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"


def start_redis(port: int, folder: Path, record: Record, timeout_s: float = 15.0) -> None:
    """redis-server on 127.0.0.1:port, no persistence, log in ``folder/redis.log``; ready when it PONGs."""
    binary = ensure_redis()
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "redis.log"
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(folder), "--daemonize", "no", "--logfile", str(log)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    record("redis", proc.pid, "redis-server")
    _wait(lambda: ping(port), proc, f"redis-server on port {port}", log, timeout_s, RedisServerError)


def _reachable_by_others(path: Path) -> bool:
    """Every parent of ``path`` can be traversed by another user (postgres, when we are root)."""
    return all(p.stat().st_mode & stat.S_IXOTH for p in path.resolve().parents if p.exists())


def postgres_home(folder: Path) -> Path:
    """Where the cluster's PostgreSQL keeps its data: ``folder``, or, when we are root and the postgres
    user cannot reach ``folder`` (a 0700 temp dir), a private folder of its own under the temp dir."""
    user = _as_user()
    if user and not _reachable_by_others(folder):
        home = Path(tempfile.mkdtemp(prefix="farebox-cluster-pg-"))
    else:
        folder.mkdir(parents=True, exist_ok=True)
        home = folder
    if user:
        os.chown(home, *user)
    return home


def start_postgres(port: int, home: Path, record: Record, timeout_s: float = 30.0) -> None:
    """``initdb`` into ``home`` (from ``postgres_home``) + ``postgres`` on 127.0.0.1:port with a ``farebox``
    database."""
    bin_dir = ensure_postgres()
    user = _as_user()

    def as_postgres() -> None:
        if user:
            os.setgid(user[1])
            os.setuid(user[0])

    done = subprocess.run([str(bin_dir / "initdb"), "-D", str(home / "data"), "-U", "postgres", "-A", "trust",
                           "-E", "UTF8", "--no-sync"], capture_output=True, text=True, preexec_fn=as_postgres,  # noqa: PLW1509
                          check=False)
    if done.returncode != 0:
        raise PostgresServerError(f"initdb failed ({done.returncode}):\n{done.stderr[-1500:]}")
    log = home / "postgres.log"
    out = open(log, "ab")
    try:
        proc = subprocess.Popen(
            [str(bin_dir / "postgres"), "-D", str(home / "data"), "-p", str(port), "-k", str(home),
             "-c", "listen_addresses=127.0.0.1", "-c", "max_connections=100"],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, preexec_fn=as_postgres,  # noqa: PLW1509
            start_new_session=True,
        )
    finally:
        out.close()
    record("postgres", proc.pid, "postgres -D", signal.SIGINT)  # SIGINT: fast shutdown
    _wait(lambda: _create_database(port), proc, f"postgres on port {port}", log, timeout_s, PostgresServerError)


def _create_database(port: int, name: str = "farebox") -> bool:
    """True once the server answers and the database exists."""
    import psycopg

    try:
        with psycopg.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres", connect_timeout=1,
                             autocommit=True) as conn:
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
                conn.execute(f'CREATE DATABASE "{name}"')
        return True
    except psycopg.Error:
        return False
