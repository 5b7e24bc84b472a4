"""The deployment artefacts in infra/deploy parse and carry the essentials (no container engine runs here)."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

import yaml

from farebox.settings import load_settings

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "infra" / "deploy"


def _manifests() -> list[dict]:
    docs = []
    for path in sorted((DEPLOY / "k8s").glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def _one(kind: str, name: str) -> dict:
    found = [d for d in _manifests() if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def _container(deployment: dict) -> dict:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


def test_every_manifest_parses_and_names_its_kind() -> None:
    docs = _manifests()
    assert {d["kind"] for d in docs} >= {"Deployment", "Service", "PodDisruptionBudget", "HorizontalPodAutoscaler",
                                         "ConfigMap", "PersistentVolumeClaim"}
    for d in docs:
        assert d["apiVersion"] and d["metadata"]["name"].startswith("farebox")


def test_gateway_has_readiness_drain_resources_pdb_and_autoscaling_on_in_flight(tmp_path: Path) -> None:
    gateway = _one("Deployment", "farebox-gateway")
    pod = gateway["spec"]["template"]["spec"]
    c = _container(gateway)
    assert c["readinessProbe"]["httpGet"]["path"] == "/health"
    assert c["lifecycle"]["preStop"]["exec"]["command"][0] == "sleep"
    pre_stop = int(c["lifecycle"]["preStop"]["exec"]["command"][1])
    settings = load_settings(_config_file(tmp_path), env={})
    # preStop, then the drain and aiohttp's shutdown margin, all inside the grace period
    assert pod["terminationGracePeriodSeconds"] > pre_stop + settings.drain_timeout_s + 10
    assert {"cpu", "memory"} <= set(c["resources"]["requests"]) and {"cpu", "memory"} <= set(c["resources"]["limits"])
    assert pod["securityContext"]["runAsNonRoot"] is True
    labels = gateway["spec"]["template"]["metadata"]["labels"]
    pdb = _one("PodDisruptionBudget", "farebox-gateway")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert 0 < pdb["spec"]["minAvailable"] < gateway["spec"]["replicas"]
    hpa = _one("HorizontalPodAutoscaler", "farebox-gateway")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "farebox-gateway"}
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "Pods" and metric["pods"]["metric"]["name"] == "farebox_in_flight_requests"
    assert '"farebox_in_flight_requests"' in (ROOT / "proxy" / "observe" / "metrics.py").read_text()


def test_worker_and_archiver_run_their_commands_on_the_shared_config() -> None:
    for name, command in (("farebox-worker", "worker"), ("farebox-archiver", "archiver")):
        c = _container(_one("Deployment", name))
        assert c["args"][:3] == [command, "--config", "/etc/farebox/farebox.yaml"]
        assert {"cpu", "memory"} <= set(c["resources"]["requests"])
        assert any(m["mountPath"] == "/etc/farebox" for m in c["volumeMounts"])


def test_secrets_are_referenced_by_name_only_and_cover_every_provider_key(tmp_path: Path) -> None:
    docs = _manifests()
    assert not [d for d in docs if d["kind"] == "Secret"], "no Secret (and no key) belongs in the repository"
    text = "\n".join(p.read_text() for p in (DEPLOY / "k8s").glob("*.yaml"))
    assert not re.search(r"sk-[A-Za-z0-9]", text)
    env = {e["name"]: e for e in _container(_one("Deployment", "farebox-gateway"))["env"]}
    tree = yaml.safe_load(_config_file(tmp_path).read_text())
    names = {dep["api_key_env"] for dep in tree["deployments"]}
    assert names
    for name in names:
        assert env[name]["valueFrom"]["secretKeyRef"] == {"name": "farebox-provider-keys", "key": name}
    assert env["FAREBOX_CONTROL_DB"]["valueFrom"]["secretKeyRef"]["name"] == "farebox-control-db"


def _config_file(folder: Path) -> Path:
    """The ConfigMap's farebox.yaml written out, so farebox's own loader validates it."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "farebox.yaml"
    path.write_text(_one("ConfigMap", "farebox-config")["data"]["farebox.yaml"])
    return path


def test_the_configmap_is_a_valid_distributed_config(tmp_path: Path) -> None:
    settings = load_settings(_config_file(tmp_path), env={})
    assert settings.mode == "distributed" and settings.distributed.bootstrap and settings.distributed.redis_url
    assert settings.secrets_file is None


def test_the_image_is_slim_non_root_and_installs_the_pinned_lock() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    assert re.findall(r"^FROM python:3\.11-slim", text, re.M)
    assert all(line.startswith("FROM python:3.11-slim") for line in re.findall(r"^FROM .*", text, re.M))
    users = re.findall(r"^USER (\S+)", text, re.M)
    assert users and users[-1].split(":")[0] not in {"root", "0"}
    assert "-c constraints.txt" in text and "COPY pyproject.toml constraints.txt" in text


def test_systemd_units_restart_on_failure_and_say_why_the_worker_exits() -> None:
    for name, command in (("farebox-worker", "worker"), ("farebox-archiver", "archiver")):
        text = (DEPLOY / "systemd" / f"{name}.service").read_text()
        unit = configparser.ConfigParser(strict=False, interpolation=None)
        unit.read_string(text)
        service = unit["Service"]
        assert service["Restart"] == "on-failure"
        assert service["ExecStart"].split()[1:3] == [command, "--config"]
        assert service["User"] != "root"
        assert "multi-user.target" in unit["Install"]["WantedBy"]
    worker = (DEPLOY / "systemd" / "farebox-worker.service").read_text()
    assert re.search(r"^#.*\b75\b", worker, re.M) and re.search(r"^#.*\b70\b", worker, re.M)
    from streams.watchdog import EXIT_STALLED
    from streams.worker.delivery import EXIT_WRITE_FAILED

    assert (EXIT_STALLED, EXIT_WRITE_FAILED) == (75, 70)
