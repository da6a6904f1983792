"""The deployment files: compose against the Compose specification's JSON schema, every
file they name exists, nginx and Prometheus accept their configs, the images run as a
non-root user with a /ready health check, the k8s probes point at real routes."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / ".venv" / "share" / "compose_spec.json"


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's ${VAR} / ${VAR:-default} substitution, done before validation as
    compose does."""

    def value(match: re.Match) -> str:
        name, default = match.group(1), match.group(3) or ""
        return env.get(name) or default

    return re.sub(r"\$\{(\w+)(:-([^}]*))?\}", value, text)


def compose() -> dict:
    return yaml.safe_load(interpolate((ROOT / "docker-compose.yml").read_text(), {}))


def test_compose_file_is_valid_against_the_compose_spec():
    assert SCHEMA.exists(), "make test fetches the Compose schema into .venv/share"
    schema = json.loads(SCHEMA.read_text())
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(compose()), key=str)
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors]


def test_compose_references_existing_files_and_the_right_shape():
    doc = compose()
    services = doc["services"]
    for name, service in services.items():
        build = service.get("build")
        if build:
            assert (ROOT / build["context"] / build["dockerfile"]).is_file(), name
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (ROOT / source).exists(), (name, source)
    for secret in doc["secrets"].values():
        assert (ROOT / secret["file"]).is_file()
    assert services["rewardserve"]["deploy"]["replicas"] == 2
    gpu = services["rewardserve-gpu"]
    assert gpu["profiles"] == ["gpu"]
    assert gpu["deploy"]["resources"]["reservations"]["devices"][0]["driver"] == "nvidia"
    assert "rewardserve" in gpu["networks"]["default"]["aliases"]
    assert any("nginx.conf" in v for v in services["nginx"]["volumes"])
    assert any("prometheus.yml" in v for v in services["prometheus"]["volumes"])
    json.loads((ROOT / "deploy/grafana/dashboards/rewardserve.json").read_text())


@pytest.mark.parametrize("name", ["Dockerfile", "Dockerfile.gpu"])
def test_dockerfiles_run_non_root_with_a_ready_healthcheck(name):
    text = (ROOT / "deploy" / name).read_text()
    users = re.findall(r"^USER (\S+)", text, re.M)
    assert users and users[-1] not in ("root", "0")
    assert "HEALTHCHECK" in text and "/ready" in text
    assert 'VOLUME ["/models"]' in text and "HF_HOME=/models" in text
    for copied in re.findall(r"^COPY (\S+)", text, re.M):
        assert (ROOT / copied).exists(), copied


def test_prometheus_config_is_valid():
    done = subprocess.run(
        ["promtool", "check", "config", str(ROOT / "deploy/prometheus.yml")], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


def render_nginx(ports: list[int], listen: int, workdir: Path) -> Path:
    """deploy/nginx.conf with its upstream pointed at loopback replicas and its listen
    port templated; everything else as shipped."""
    text = (ROOT / "deploy/nginx.conf").read_text()
    servers = "".join(f"server 127.0.0.1:{p} max_fails=1 fail_timeout=5s;\n        " for p in ports)
    text = text.replace("server rewardserve:8000 max_fails=1 fail_timeout=5s;\n        ", servers)
    text = text.replace("listen 8080;", f"listen 127.0.0.1:{listen};")
    text = text.replace("/tmp/nginx", str(workdir / "nginx"))
    assert text.count("127.0.0.1:") == len(ports) + 1, "the upstream block changed shape"
    path = workdir / "nginx.conf"
    path.write_text(text)
    return path


def test_nginx_accepts_the_config(tmp_path):
    assert shutil.which("nginx"), "make test installs nginx"
    conf = render_nginx([18001, 18002], 18080, tmp_path)
    done = subprocess.run(
        ["nginx", "-t", "-c", str(conf), "-p", str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "test is successful" in done.stderr


def test_k8s_manifests():
    docs = {
        d["kind"]: d for f in sorted((ROOT / "deploy/k8s").glob("*.yaml")) for d in yaml.safe_load_all(f.read_text())
    }
    assert set(docs) == {"ConfigMap", "Deployment", "Service", "HorizontalPodAutoscaler"}
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/health"
    assert container["startupProbe"]["httpGet"]["path"] == "/ready"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["terminationGracePeriodSeconds"] > 5  # longer than the drain
    assert docs["HorizontalPodAutoscaler"]["spec"]["scaleTargetRef"]["name"] == docs["Deployment"]["metadata"]["name"]
    assert docs["Service"]["spec"]["selector"] == docs["Deployment"]["spec"]["selector"]["matchLabels"]
