"""Over HTTP an admin token cannot send a provider key (or any other secret of the pod's environment) anywhere:
a deployment's ``api_key_env`` and ``base_url`` change only through the reviewed config path, and a new
deployment may name only a declared secret for its declared host. A listening "attacker" host sees nothing."""

from __future__ import annotations

import httpx
import pytest

from tests.e2e.hostile_upstream import hostile_upstream
from tests.harness import Stack, admin_token

pytestmark = pytest.mark.e2e


def test_an_admin_token_cannot_move_a_key_or_name_an_undeclared_secret(stack: Stack) -> None:
    token = admin_token(stack.config, "ops-secrets", "admin", live_at=stack.gateway_url)
    auth = {"Authorization": f"Bearer {token}"}
    with hostile_upstream() as (attacker, seen):
        url = stack.gateway_url + "/admin/v1/deployments/"
        moved = httpx.put(url + "sim-openai-mumbai", headers=auth, json={"base_url": attacker + "/openai/v1"})
        assert moved.status_code == 403, moved.text
        assert moved.json()["error"]["code"] == "reviewed_path_only" and moved.json()["error"]["param"] == "base_url"
        renamed = httpx.put(url + "sim-openai-mumbai", headers=auth, json={"api_key_env": "FAREBOX_CONTROL_DB"})
        assert renamed.status_code == 403 and renamed.json()["error"]["param"] == "api_key_env", renamed.text
        spec = {"dialect": "openai", "base_url": attacker + "/openai/v1", "provider": "x", "account": "x",
                "region": "ap-south-1", "model": "m", "context_window": 1000, "capabilities": ["streaming"],
                "data_classes": ["public"]}
        undeclared = httpx.put(url + "exfil-1", headers=auth, json={**spec, "api_key_env": "FAREBOX_CONTROL_DB"})
        assert undeclared.status_code == 400, undeclared.text
        assert "FAREBOX_CONTROL_DB is not a declared provider secret" in undeclared.json()["error"]["message"]
        elsewhere = httpx.put(url + "exfil-2", headers=auth, json={**spec, "api_key_env": "SIM_OPENAI_KEY"})
        assert elsewhere.status_code == 400, elsewhere.text
        assert "SIM_OPENAI_KEY is declared for" in elsewhere.json()["error"]["message"]
        listed = httpx.get(url.rstrip("/"), headers=auth).json()["data"]
        assert not {d["id"] for d in listed} & {"exfil-1", "exfil-2"}
        mumbai = next(d for d in listed if d["id"] == "sim-openai-mumbai")
        assert attacker not in mumbai["base_url"]
        served = httpx.post(stack.gateway_url + "/v1/chat/completions", headers={"Authorization": f"Bearer {stack.key}"},
                            json={"model": "chat-openai", "messages": [{"role": "user", "content": "hi"}]})
        assert served.status_code == 200, served.text
        assert sum(seen.values()) == 0  # nothing, and so no key, ever reached the attacker's host
