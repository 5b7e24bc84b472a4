"""Real processes for end-to-end tests and benchmarks: simulator + gateway.

Each stack gets free ports, its own config, event log and key file in a
temporary folder, and is stopped (SIGTERM, then SIGKILL) when done.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

import yaml

from infra.cluster_config import owner_only_secrets
from infra.process import free_port

if TYPE_CHECKING:
    from infra.redis.server import RedisServer

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def wait_http(url: str, proc: subprocess.Popen, log: Path, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: process exited {proc.returncode}:\n{log.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(url, timeout=1) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{url} not ready in {timeout}s:\n{log.read_text()[-4000:]}")


def admin_token(config: Path, name: str, role: str, *, live_at: str | None = None, timeout: float = 20.0) -> str:
    """An admin token made by ``farebox admin token create`` (written to the config database).

    With ``live_at`` (a running gateway's base URL) it returns only once that
    gateway accepts the token: pods learn of it at their next config poll, so a
    request sent straight after the CLI returns could still get 401.
    """
    out = subprocess.run([sys.executable, "-m", "farebox", "admin", "token", "create", "--config", str(config),
                          "--name", name, "--role", role, "--json"], cwd=ROOT, check=True, capture_output=True, text=True)
    token = json.loads(out.stdout)["token"]
    if live_at is not None:
        deadline = time.monotonic() + timeout
        request = urllib.request.Request(live_at + "/admin/v1/audit?limit=1", headers={"Authorization": f"Bearer {token}"})
        while True:
            try:
                with urllib.request.urlopen(request, timeout=5):
                    break
            except urllib.error.HTTPError as err:  # 403 for a role without audit access: known, so live
                if err.code != 401:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"admin token {name!r} not accepted by {live_at} within {timeout}s")
            time.sleep(0.05)
    return token


def wait_log_line(text: str, proc: subprocess.Popen, log: Path, *, since: int = 0, timeout: float = 30.0) -> None:
    """Until ``log`` holds ``text`` past byte ``since`` (the file's size when ``proc`` was started)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(log, "rb") as f:
            f.seek(since)
            if text.encode() in f.read():
                return
        if proc.poll() is not None:
            raise RuntimeError(f"{text!r}: process exited {proc.returncode}:\n{log.read_text()[-4000:]}")
        time.sleep(0.05)
    raise RuntimeError(f"{text!r} not in {log} within {timeout}s:\n{log.read_text()[-4000:]}")


def wait_serving(proc: subprocess.Popen, log: Path, url: str, serve_args: tuple[str, ...], since: int = 0) -> None:
    """Until ``farebox serve`` started with ``serve_args`` serves: with ``--workers``, once the owner printed
    (past byte ``since`` of ``log``) that every gateway process is up (the first answers /health before the
    others are), and /health answers."""
    if any(arg == "--workers" or arg.startswith("--workers=") for arg in serve_args):
        wait_log_line("farebox serving on", proc, log, since=since)
    wait_http(url + "/health", proc, log)


def stop(proc: subprocess.Popen, timeout: float = 10.0) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def spawn(args: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    out = open(log, "ab")
    try:
        return subprocess.Popen(
            [sys.executable, "-m", *args], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
    finally:
        out.close()


def test_config(folder: Path, sim_port: int, gw_port: int, mutate: Callable[[dict], None] | None = None) -> Path:
    """examples/farebox.yaml pointed at this stack, plus one alias per dialect (chat-openai: a deployment serving
    chat and the Responses API; chat-compat: one serving chat only; chat-anthropic: the Messages API)."""
    tree = yaml.safe_load((EXAMPLES / "farebox.yaml").read_text())
    tree["server"]["port"] = gw_port
    tree["server"]["pod_id"] = f"test-pod-{gw_port}"
    # The shared stacks send wrong keys on purpose, all from 127.0.0.1: failed-auth throttling is tested on its own.
    tree["server"]["auth_failures_per_minute"] = 0
    # Many gateways share a loaded CI box, where a busy loop is the box, not the gateway: tests that need a
    # request served do not shed. Shedding is tested on its own (tests/proxy/test_overload.py, make bench-overload).
    tree["server"]["overload"] = {"enabled": False}
    tree["event_log"]["path"] = str(folder / "events.sqlite")
    tree["state_dir"] = str(folder)
    tree["secrets_file"] = str(owner_only_secrets(folder))
    for dep in tree["deployments"]:
        dep["base_url"] = dep["base_url"].replace("9090", str(sim_port))
    compat = next(dict(d) for d in tree["deployments"] if d["id"] == "sim-openai-mumbai")
    compat.update(id="sim-compat-mumbai", capabilities=[c for c in compat["capabilities"] if c != "responses"])
    tree["deployments"].append(compat)  # an OpenAI-compatible fleet that serves chat only (vLLM-like)
    tree["aliases"] += [
        {"name": "chat-openai", "kind": "chat", "deployments": ["sim-openai-mumbai"], "batch_service_tier": "flex"},
        {"name": "chat-anthropic", "kind": "chat", "deployments": ["sim-anthropic-mumbai"]},
        {"name": "chat-compat", "kind": "chat", "deployments": ["sim-compat-mumbai"]},
        {"name": "chat-azure", "kind": "chat", "deployments": ["sim-azure-mumbai"]},
        {"name": "chat-bedrock", "kind": "chat", "deployments": ["sim-bedrock-mumbai"]},
        {"name": "chat-gemini", "kind": "chat", "deployments": ["sim-gemini-mumbai"]},
    ]
    if mutate is not None:
        mutate(tree)
    path = folder / "farebox.yaml"
    path.write_text(yaml.safe_dump(tree, sort_keys=False))
    return path


def without_standbys(tree: dict) -> dict:
    """The config tree with every alias's standbys (weight 0) taken out: routing tests written for the two
    weighted deployments of chat-default keep seeing only them."""
    standby = {d["id"] for d in tree.get("deployments", ()) if d.get("weight", 1) == 0}
    for alias in tree.get("aliases", ()):
        weighted = [d for d in alias["deployments"] if d not in standby]
        alias["deployments"] = weighted or alias["deployments"]  # an alias of standbys only keeps them
    return tree


def sim_config(folder: Path, mutate: Callable[[dict], None] | None = None, **defaults) -> Path:
    tree = yaml.safe_load((EXAMPLES / "simulator.yaml").read_text())
    tree["defaults"] = {"ttft_ms": 0, "tokens_per_s": 0, "output_tokens": 32, **defaults}
    tree["models"] = {}
    if mutate is not None:
        mutate(tree)
    path = folder / "simulator.yaml"
    path.write_text(yaml.safe_dump(tree))
    return path


def mint(config: Path, team: str, app: str, aliases: str, *extra: str) -> str:
    """A new key's plaintext (``minted`` for its id too)."""
    return minted(config, team, app, aliases, *extra)["key"]


def minted(config: Path, team: str, app: str, aliases: str, *extra: str) -> dict:
    """A new key as ``keys create --json`` prints it (``key``, ``id``, ...): ``farebox keys create ... --json``, the CLI's own parser and code run in this
    process (a subprocess per key spent a second of CPU on imports alone), in a thread of its own because the
    command runs its own event loop and a caller may be inside one."""
    from farebox.cli import main

    argv = ["keys", "create", "--config", str(config), "--team", team, "--app", app, "--aliases", aliases, "--json",
            *extra]
    out, err = io.StringIO(), io.StringIO()

    def run() -> int:
        with redirect_stdout(out), redirect_stderr(err):
            return main(argv)

    with ThreadPoolExecutor(max_workers=1) as pool:
        code = pool.submit(run).result()
    assert code == 0, f"farebox {' '.join(argv)} exited {code}: {err.getvalue()}"
    return json.loads(out.getvalue())


@dataclass
class Stack:
    """A running simulator + gateway; ``restart_gateway`` stops (or kills) and starts it again."""

    folder: Path
    config: Path
    sim_url: str
    gateway_url: str
    key: str
    gateway: subprocess.Popen
    simulator: subprocess.Popen
    serve_args: tuple[str, ...] = ()

    @property
    def events_path(self) -> Path:
        return self.folder / "events.sqlite"

    def restart_gateway(self, *, kill: bool = False) -> None:
        if kill:
            self.gateway.kill()
            self.gateway.wait()
        else:
            stop(self.gateway)
        log = self.folder / "gateway.log"
        since = log.stat().st_size if log.exists() else 0
        self.gateway = spawn(["farebox", "serve", "--config", str(self.config), *self.serve_args], log)
        wait_serving(self.gateway, log, self.gateway_url, self.serve_args, since)


@contextmanager
def running_stack(folder: Path, *, aliases: str = ("chat-default,chat-openai,chat-anthropic,chat-compat,chat-azure,chat-bedrock,chat-gemini,"
                                      "embed-default"),
                  sim_defaults: dict | None = None, gateway_wrap: tuple[str, ...] = (),
                  mutate: Callable[[dict], None] | None = None,
                  serve_args: tuple[str, ...] = (),
                  sim_mutate: Callable[[dict], None] | None = None) -> Iterator[Stack]:
    """``gateway_wrap`` prefixes the gateway's ``-m`` arguments, e.g. ``("cProfile", "-o", path, "-m")``;
    ``serve_args`` follow ``farebox serve --config PATH``, e.g. ``("--workers", "2")``; ``mutate`` and
    ``sim_mutate`` edit the gateway's and the simulator's config trees before they are written."""
    folder.mkdir(parents=True, exist_ok=True)
    sim_port, gw_port = free_port(), free_port()
    config = test_config(folder, sim_port, gw_port, mutate)
    sim = spawn(["farebox", "simulator", "--config", str(sim_config(folder, sim_mutate, **(sim_defaults or {}))),
                 "--port", str(sim_port)], folder / "simulator.log")
    gw = None
    stack: Stack | None = None
    try:
        wait_http(f"http://127.0.0.1:{sim_port}/_sim/health", sim, folder / "simulator.log")
        key = mint(config, "platform", "playground", aliases)
        gw = spawn([*gateway_wrap, "farebox", "serve", "--config", str(config), *serve_args], folder / "gateway.log")
        wait_serving(gw, folder / "gateway.log", f"http://127.0.0.1:{gw_port}", serve_args)
        stack = Stack(folder, config, f"http://127.0.0.1:{sim_port}", f"http://127.0.0.1:{gw_port}", key, gw, sim,
                      serve_args)
        yield stack
    finally:
        if stack is not None:
            gw = stack.gateway
        if gw is not None:
            stop(gw)
        stop(sim)


def wait_key_live(gateway_url: str, key: str, timeout: float = 5.0) -> None:
    """Keys minted while serving go live with the next snapshot reload (~1 s)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        req = urllib.request.Request(gateway_url + "/v1/models", headers={"Authorization": f"Bearer {key}"})
        try:
            with urllib.request.urlopen(req, timeout=1):
                return
        except urllib.error.HTTPError as exc:
            if exc.code != 401:
                raise
        time.sleep(0.1)
    raise AssertionError(f"key not live on {gateway_url} within {timeout}s")


def read_events(path: Path) -> list:
    """Every event in a SQLite event log, in order (read-only: the gateway may still be writing)."""
    import asyncio

    from streams.sqlite_log import SqliteEventLog

    async def main() -> list:
        log = SqliteEventLog.open(path, readonly=True)
        try:
            out, after = [], 0
            while batch := await log.read(after=after, limit=5000):
                out += [e for _, e in batch]
                after = batch[-1][0]
            return out
        finally:
            await log.close()

    return asyncio.run(main())


GENEROUS = {"rpm": 1_000_000, "input_tpm": 100_000_000, "output_tpm": 100_000_000}


def generous_limits(tree: dict) -> None:
    """Config mutator for benchmarks: rate limits and budgets far above the load (still enforced, never hit)."""
    rl = tree.setdefault("rate_limits", {})
    rl["key_defaults"] = dict(GENEROUS)
    rl["team_tpm"] = {team["name"]: GENEROUS["input_tpm"] for team in tree["teams"]}
    for dep in tree["deployments"]:
        dep["limits"] = dict(GENEROUS)
    for scope in tree.get("budgets", {}).get("scopes", []):
        scope["monthly_limit"] = "100000000.00"


def start_redis(port: int | None = None) -> "RedisServer":
    """A real redis-server for a test; a test that needs Redis fails without one, never skips."""
    import pytest

    from infra.redis.server import RedisServer, RedisServerError

    try:
        return RedisServer(port).start()
    except RedisServerError as exc:
        pytest.fail(f"could not start redis-server: {exc}", pytrace=False)
