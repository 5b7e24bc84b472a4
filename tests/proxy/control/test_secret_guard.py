"""Secrets by declaration: the admin API cannot move a provider key, and a key never leaves for a host it was
not declared for (``proxy.snapshot.secrets``, ``proxy.control.secret_guard``, ``UpstreamClient.secret_for``)."""

from __future__ import annotations

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from proxy.control.errors import ConfigRejected, ReviewedPathOnly
from proxy.control.secret_guard import secret_guard
from proxy.errors import UpstreamError
from proxy.snapshot import Deployment, Secrets
from proxy.snapshot.secrets import SecretHosts, SecretNotDeclared, host_matches
from proxy.upstream.relay import UpstreamClient

HOSTS = SecretHosts({"OPENAI_KEY": ("api.openai.com",), "SIM_KEY": ("127.0.0.1:9090",),
                     "AZURE_KEY": ("*.openai.azure.com",)})


@pytest.mark.parametrize(("pattern", "host", "port", "ok"), [
    ("api.openai.com", "api.openai.com", 443, True),
    ("api.openai.com", "api.openai.com.evil.test", None, False),
    ("127.0.0.1:9090", "127.0.0.1", 9090, True),
    ("127.0.0.1:9090", "127.0.0.1", 9091, False),
    ("*.openai.azure.com", "acme.openai.azure.com", None, True),
    ("*.openai.azure.com", "openai.azure.com", None, False),
    ("*.openai.azure.com", "acme.openai.azure.com.evil.test", None, False),
])
def test_host_patterns(pattern: str, host: str, port: int | None, ok: bool) -> None:
    assert host_matches(pattern, host, port) is ok


def test_a_key_is_handed_out_only_for_its_declared_host() -> None:
    secrets = Secrets({"OPENAI_KEY": "sk-real", "BODYLOG_MASTER": "master"}, HOSTS)
    assert secrets.for_url("OPENAI_KEY", "https://api.openai.com/v1") == "sk-real"
    with pytest.raises(SecretNotDeclared, match="not for evil.test"):
        secrets.for_url("OPENAI_KEY", "https://evil.test/v1")
    with pytest.raises(SecretNotDeclared, match="not a declared provider secret"):
        secrets.for_url("BODYLOG_MASTER", "https://api.openai.com/v1")
    for message in (str(HOSTS.problem("OPENAI_KEY", "https://evil.test")), repr(secrets)):
        assert "sk-real" not in message and "master" not in message


def test_the_admin_api_cannot_move_an_existing_key() -> None:
    old = {"dialect": "openai", "base_url": "http://127.0.0.1:9090/v1", "api_key_env": "SIM_KEY", "weight": 1}
    with pytest.raises(ReviewedPathOnly, match="api_key_env changes only through the reviewed config path"):
        secret_guard("d1", old, {**old, "api_key_env": "OPENAI_KEY"}, HOSTS)
    with pytest.raises(ReviewedPathOnly, match="base_url changes only"):
        secret_guard("d1", old, {**old, "base_url": "http://attacker.test/v1"}, HOSTS)
    spec = {"dialect": "openai", "weight": 5}  # neither named: both kept as they are
    secret_guard("d1", old, spec, HOSTS)
    assert spec["api_key_env"] == "SIM_KEY" and spec["base_url"] == old["base_url"]
    same = {**old, "weight": 7}
    secret_guard("d1", old, same, HOSTS)  # other fields change freely


def test_a_new_deployment_names_only_a_declared_secret_for_its_host() -> None:
    with pytest.raises(ConfigRejected, match="FAREBOX_BODY_LOG_KEY is not a declared provider secret"):
        secret_guard("new", None, {"base_url": "https://api.openai.com/v1", "api_key_env": "FAREBOX_BODY_LOG_KEY"},
                     HOSTS)
    with pytest.raises(ConfigRejected, match="declared for"):
        secret_guard("new", None, {"base_url": "https://attacker.test/v1", "api_key_env": "OPENAI_KEY"}, HOSTS)
    secret_guard("new", None, {"base_url": "https://api.openai.com/v1", "api_key_env": "OPENAI_KEY"}, HOSTS)
    secret_guard("new", None, {"base_url": "http://10.0.0.5/v1"}, HOSTS)  # no key at all: nothing to move


async def test_no_request_leaves_for_an_undeclared_host() -> None:
    seen: list[web.Request] = []

    async def capture(request: web.Request) -> web.Response:
        seen.append(request)
        return web.json_response({})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", capture)
    server = TestServer(app)
    await server.start_server()
    try:
        dep = Deployment(id="d1", dialect="openai", base_url=str(server.make_url("/v1")), provider="p", account="a",
                         region="r", model="m", context_window=1000, capabilities=frozenset(), data_classes=("public",),
                         secret_ref="SIM_KEY")  # declared for :9090 only
        async with aiohttp.ClientSession() as session:
            client = UpstreamClient(Secrets({"SIM_KEY": "sk-sim"}, HOSTS), session)
            with pytest.raises(UpstreamError, match="cannot be called: SIM_KEY is declared for") as caught:
                client.secret_for(dep)
            assert caught.value.code == "provider_secret_not_declared" and "sk-sim" not in str(caught.value)
        assert seen == []
    finally:
        await server.close()
