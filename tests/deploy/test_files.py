"""The deployment files: compose against the Compose specification's JSON schema, every
file they name exists, nginx and Prometheus accept their configs, the images run as a
non-root user with a /ready health check, the k8s probes point at real routes."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import jsonschema
import pytest
import yaml

from tests.harness import free_port

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


RESOLVE_SINCE = (1, 27, 3)  # open-source nginx: `resolve` on an upstream's server line


def nginx_version() -> tuple[int, ...]:
    done = subprocess.run(["nginx", "-v"], capture_output=True, text=True, timeout=30)
    found = re.search(r"nginx/(\d+)\.(\d+)\.(\d+)", done.stderr)
    assert found, done.stderr
    return tuple(int(g) for g in found.groups())


def for_installed_nginx(text: str) -> str:
    """An nginx older than 1.27.3 refuses `resolve`: without it (and the zone it needs)
    the file is what such an nginx can run, the addresses resolved once at start."""
    if nginx_version() >= RESOLVE_SINCE:
        return text
    text = re.sub(r" resolve;", ";", text)
    return re.sub(r"\n\s*zone rewardserve \S+;", "", text)


def render_nginx(ports: list[int], listen: int, workdir: Path) -> Path:
    """deploy/nginx.conf with its upstream pointed at loopback replicas and its listen
    port templated; everything else as shipped (less `resolve` for an nginx that lacks
    it: loopback addresses need no DNS anyway)."""
    text = for_installed_nginx((ROOT / "deploy/nginx.conf").read_text())
    line = re.search(r"server rewardserve:8000 (max_fails=1 fail_timeout=5s)( resolve)?;\n\s*", text)
    assert line, "the upstream block changed shape"
    servers = "".join(f"server 127.0.0.1:{p} {line.group(1)};\n        " for p in ports)
    text = text.replace(line.group(0), servers)
    text = text.replace("listen 8080;", f"listen 127.0.0.1:{listen};")
    text = text.replace("/tmp/nginx", str(workdir / "nginx"))
    assert text.count("127.0.0.1:") == len(ports) + 1, "the upstream block changed shape"
    path = workdir / "nginx.conf"
    path.write_text(text)
    return path


def test_nginx_config_re_resolves_the_replicas():
    """Docker's DNS, answers kept a few seconds, a shared zone and `resolve` on the
    replicas' server line: new and moved replicas are seen without a reload; and the
    compose image is an nginx that knows `resolve`."""
    text = (ROOT / "deploy/nginx.conf").read_text()
    resolver = re.search(r"^\s*resolver 127\.0\.0\.11 .*valid=(\d+)s.*;", text, re.M)
    assert resolver and int(resolver.group(1)) <= 30
    upstream = re.search(r"upstream rewardserve \{(.*?)\}", text, re.S)
    assert upstream and re.search(r"^\s*zone rewardserve \d+k;", upstream.group(1), re.M)
    assert re.search(r"^\s*server rewardserve:8000 .*\bresolve;", upstream.group(1), re.M)
    image = compose()["services"]["nginx"]["image"]
    version = re.fullmatch(r"nginx:(\d+)\.(\d+)\.(\d+)-alpine", image)
    assert version, f"pin the nginx image to a full version: {image}"
    assert tuple(int(g) for g in version.groups()) >= RESOLVE_SINCE, image


def test_nginx_accepts_the_config(tmp_path):
    """`nginx -t` on the shipped file itself (nothing needs resolving at start: the
    upstream resolves as it runs) when the installed nginx knows `resolve`, else on the
    file less `resolve` with the replicas' name on loopback; and on the copy the
    load-balancer test runs."""
    assert shutil.which("nginx"), "make test installs nginx"
    text = (ROOT / "deploy/nginx.conf").read_text()
    if nginx_version() < RESOLVE_SINCE:
        # Without `resolve` the name must resolve at start; there is no `rewardserve` here.
        text = for_installed_nginx(text).replace("server rewardserve:8000 ", "server 127.0.0.1:8000 ")
    shipped = tmp_path / "shipped.conf"
    shipped.write_text(text)
    for conf in [shipped, render_nginx([18001, 18002], 18080, tmp_path)]:
        done = subprocess.run(
            ["nginx", "-t", "-c", str(conf), "-p", str(tmp_path)], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert "test is successful" in done.stderr


def set_answers(path: Path, answers: dict[str, list[str]]) -> None:
    """What the DNS stub answers from now on (written whole, then renamed into place)."""
    part = path.with_suffix(".part")
    part.write_text(json.dumps(answers))
    part.replace(path)


@contextmanager
def dns_stub(answers: Path) -> Iterator[int]:
    """tests/deploy/dns_stub.py as a process; yields its UDP port on 127.0.0.1."""
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("dns_stub.py")), str(answers)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        yield int(proc.stdout.readline())
    finally:
        proc.kill()
        proc.wait(timeout=30)


@contextmanager
def nginx_process(conf: Path, workdir: Path, listen: int) -> Iterator[str]:
    """A real nginx on conf; yields its URL once /nginx-health answers (at most 30 s)."""
    log = (workdir / "nginx-stderr.log").open("w")
    proc = subprocess.Popen(
        ["nginx", "-c", str(conf), "-p", str(workdir), "-g", "daemon off; user root;"],
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    url = f"http://127.0.0.1:{listen}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert proc.poll() is None, (workdir / "nginx-stderr.log").read_text()
            try:
                if httpx.get(url + "/nginx-health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        yield url
    finally:
        proc.kill()
        proc.wait(timeout=30)
        log.close()


class _Named(BaseHTTPRequestHandler):
    """A stand-in replica: answers every GET with the address it listens on."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = self.server.server_address[0].encode()  # type: ignore[union-attr]
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.mark.long(20)
def test_nginx_follows_replicas_that_move_while_it_runs(tmp_path):
    """The shipped file, only its resolver (a DNS stub), port and paths templated, on a
    real nginx that is never reloaded: stand-in replicas on 127.0.0.2 and 127.0.0.3, the
    name `rewardserve` moved from one to the other, then to both; nginx follows within
    its `valid=`, every request answered; then one dies while DNS still names it and no
    request is lost."""
    assert shutil.which("nginx"), "make test installs nginx"
    if nginx_version() < RESOLVE_SINCE:
        pytest.skip(
            f"nginx {'.'.join(map(str, nginx_version()))} here lacks `resolve` in upstream "
            "(open-source nginx >= 1.27.3, the compose image); the config is checked without it"
        )
    port, listen = free_port(), free_port()
    text = (ROOT / "deploy/nginx.conf").read_text()
    valid = int(re.search(r"valid=(\d+)s", text).group(1))
    servers = [ThreadingHTTPServer((host, port), _Named) for host in ("127.0.0.2", "127.0.0.3")]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    answers = tmp_path / "answers.json"
    set_answers(answers, {"rewardserve": ["127.0.0.2"]})

    def seen_within(url: str, want: set[str], seconds: float) -> set[str]:
        """Who answers, polled until all of `want` have (or the time is up); every
        response must be a 200 from a replica."""
        seen: set[str] = set()
        deadline = time.monotonic() + seconds
        while not want <= seen and time.monotonic() < deadline:
            response = httpx.get(url + "/who", timeout=10)
            assert response.status_code == 200, response.text
            seen.add(response.text)
            time.sleep(0.05)
        return seen

    try:
        with dns_stub(answers) as dns_port:
            for old, new in [
                ("resolver 127.0.0.11 ", f"resolver 127.0.0.1:{dns_port} "),
                ("rewardserve:8000 ", f"rewardserve:{port} "),
                ("listen 8080;", f"listen 127.0.0.1:{listen};"),
            ]:
                assert text.count(old) == 1, f"nginx.conf changed shape: {old!r}"
                text = text.replace(old, new)
            conf = tmp_path / "nginx.conf"
            conf.write_text(text.replace("/tmp/nginx", str(tmp_path / "nginx")))
            with nginx_process(conf, tmp_path, listen) as url:
                assert seen_within(url, {"127.0.0.2"}, 10) == {"127.0.0.2"}
                set_answers(answers, {"rewardserve": ["127.0.0.3"]})  # the replica moved
                assert "127.0.0.3" in seen_within(url, {"127.0.0.3"}, valid + 10)
                assert seen_within(url, {"127.0.0.3"}, 1) == {"127.0.0.3"}  # and stays there
                set_answers(answers, {"rewardserve": ["127.0.0.2", "127.0.0.3"]})  # scaled up
                assert seen_within(url, {"127.0.0.2", "127.0.0.3"}, valid + 10) == {"127.0.0.2", "127.0.0.3"}
                servers[0].shutdown()  # one dies; DNS still names it
                servers[0].server_close()
                assert seen_within(url, {"never"}, 2) == {"127.0.0.3"}
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


def test_k8s_manifests_are_valid_against_kubernetes_own_schemas():
    """kubernetes-validate: the OpenAPI schemas of the Kubernetes release it names as
    latest, strict (an unknown field is an error, as kubectl --validate=strict has it)."""
    import copy

    import kubernetes_validate
    from kubernetes_validate.utils import latest_version

    version = latest_version()
    docs = [d for f in sorted((ROOT / "deploy/k8s").glob("*.yaml")) for d in yaml.safe_load_all(f.read_text())]
    assert len(docs) == 4
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)
    typo = copy.deepcopy(next(d for d in docs if d["kind"] == "Deployment"))
    typo["spec"]["replicass"] = typo["spec"].pop("replicas", 1)
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(typo, version, strict=True)


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
    hpa_target = docs["HorizontalPodAutoscaler"]["spec"]["scaleTargetRef"]
    assert (hpa_target["kind"], hpa_target["name"]) == ("Deployment", docs["Deployment"]["metadata"]["name"])
    # The HPA's CPU target is a share of the CPU request: without one it cannot scale.
    requests = container["resources"]["requests"]
    assert requests.get("cpu") and requests.get("memory")
    assert any(
        m["type"] == "Resource" and m["resource"]["name"] == "cpu"
        for m in docs["HorizontalPodAutoscaler"]["spec"]["metrics"]
    )
    # The keys file the service reads at start (a missing one stops it) must be there.
    keys_file = next(e["value"] for e in container["env"] if e["name"] == "REWARDSERVE_API_KEYS_FILE")
    mount = next(m for m in container["volumeMounts"] if keys_file.startswith(m["mountPath"] + "/"))
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume["secret"].get("optional") is False
    assert docs["Service"]["spec"]["selector"] == docs["Deployment"]["spec"]["selector"]["matchLabels"]


def test_compose_publishes_only_on_loopback_by_default():
    """nginx, Prometheus and Grafana answer anyone who reaches them: published on
    127.0.0.1 unless REWARDSERVE_PUBLISH_IP says otherwise; Grafana's anonymous visitors
    may only view."""
    services = compose()["services"]
    published = {name: s["ports"] for name, s in services.items() if s.get("ports")}
    assert set(published) == {"nginx", "prometheus", "grafana"}
    for name, ports in published.items():
        for port in ports:
            assert str(port).startswith("127.0.0.1:") and str(port).count(":") == 2, (name, port)
    exposed = yaml.safe_load(
        interpolate((ROOT / "docker-compose.yml").read_text(), {"REWARDSERVE_PUBLISH_IP": "0.0.0.0"})
    )
    assert exposed["services"]["nginx"]["ports"] == ["0.0.0.0:8080:8080"]
    grafana = services["grafana"]["environment"]
    if str(grafana.get("GF_AUTH_ANONYMOUS_ENABLED", "false")).lower() == "true":
        assert grafana.get("GF_AUTH_ANONYMOUS_ORG_ROLE") == "Viewer"


DASHBOARD = ROOT / "deploy/grafana/dashboards/rewardserve.json"
# What Grafana puts in for its variables, to check the queries as Prometheus gets them.
GRAFANA_VARIABLES = {"$model": ".*", "$instance": ".*", "$__rate_interval": "1m", "$__interval": "1m"}


def dashboard_queries() -> list[tuple[str, str]]:
    def panels(items: list[dict]) -> Iterator[dict]:
        for panel in items:
            yield panel
            yield from panels(panel.get("panels", []))

    board = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in panels(board["panels"]) for t in p.get("targets", [])]


def exposed_names() -> set[str]:
    """The sample names the service exposes, from the registry a real app builds (every
    module that registers metrics on it: requests, batching, reward health, tenants,
    shadow scoring)."""
    from rewardserve.service.app import create_app

    registry = create_app().state.svc.metrics.registry
    suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"], "gauge": [""]}
    return {f.name + s for f in registry.collect() for s in suffixes.get(f.type, [""])}


def test_dashboard_queries_name_only_metrics_the_service_exposes():
    names = exposed_names()
    queries = dashboard_queries()
    used = set()
    for title, expr in queries:
        # Every selector (`name{...}`) and every rewardserve_ name.
        for name in set(re.findall(r"([a-zA-Z_:][\w:]*)\{", expr)) | set(re.findall(r"\brewardserve_\w+", expr)):
            assert name in names, f"{title}: {name} is not a metric the service exposes"
            used.add(name)
    board = json.loads(DASHBOARD.read_text())
    for variable in board["templating"]["list"]:
        for name in re.findall(r"\brewardserve_\w+", json.dumps(variable["query"])):
            assert name in names, (variable["name"], name)
    # The families issue 39 asked for are on the board.
    for wanted in [
        "rewardserve_reward_score_bucket",
        "rewardserve_reward_zero_variance_groups_ratio",
        "rewardserve_reward_length_correlation",
        "rewardserve_cache_hits_total",
        "rewardserve_cache_misses_total",
        "rewardserve_tenant_requests_total",
        "rewardserve_shadow_spearman",
    ]:
        assert wanted in used, wanted


def test_dashboard_request_panels_count_scoring_routes_only():
    """Latency and request rate over the scoring routes: Prometheus' scrapes of /metrics
    and the probes of /health and /ready would swamp both."""
    from rewardserve.service.app import create_app

    paths = create_app().openapi()["paths"]
    not_scoring = {"/tokenize"}  # a tokenizer's answer, no reward
    # The admin API's calls (sleep, wake, load) are not requests to score either.
    scoring = {path for path, ops in paths.items() if "post" in ops and not path.startswith("/v1/admin/")} - not_scoring
    assert scoring and not scoring & {"/metrics", "/health", "/ready"}
    request_queries = [(title, expr) for title, expr in dashboard_queries() if "rewardserve_request" in expr]
    assert request_queries
    for title, expr in request_queries:
        for selector in re.findall(r"rewardserve_request(?:s_total|_duration_seconds_\w+)\{([^}]*)\}", expr):
            route = re.search(r'route=~"([^"]+)"', selector)
            assert route, f"{title}: no route filter in {selector}"
            pattern = re.compile(route.group(1))
            for path in ("/metrics", "/health", "/ready", "/v1/models", "unmatched", *not_scoring):
                assert not pattern.fullmatch(path), f"{title} counts {path}"
            missing = {path for path in scoring if not pattern.fullmatch(path)}
            assert not missing, f"{title} leaves out scoring routes {missing}"


def test_dashboard_has_model_and_instance_variables_used_by_its_panels():
    board = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert {"model", "instance"} <= set(variables)
    for name in ("model", "instance"):
        assert variables[name]["type"] == "query" and variables[name]["includeAll"]
        assert variables[name]["allValue"] == ".*"  # series without the label still match
        assert "label_values(" in json.dumps(variables[name]["query"])
    queries = dashboard_queries()
    assert all('instance=~"$instance"' in expr for _, expr in queries)
    assert all('model=~"$model"' in expr for _, expr in queries if "rewardserve_tenant_" not in expr)


def test_dashboard_queries_are_valid_promql(tmp_path):
    """promtool parses every query (as recording rules, Grafana's variables filled in)."""
    assert shutil.which("promtool"), "make test installs promtool (Debian's prometheus)"
    rules = []
    for k, (_, expr) in enumerate(dashboard_queries()):
        for variable, value in GRAFANA_VARIABLES.items():
            expr = expr.replace(variable, value)
        assert "$" not in expr, expr
        rules.append({"record": f"dashboard:query_{k}", "expr": expr})
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    done = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(rules)} rules found" in done.stdout


PROFILE = ROOT / "deploy" / "seccomp-bwrap.json"
# Docker's default seccomp profile as Docker 28.5.2 ships it (moby v28.5.2,
# vendor/github.com/moby/profiles/seccomp/default.json).
DOCKER_DEFAULT = Path(__file__).resolve().parent / "data" / "docker-v28.5.2-seccomp-default.json"


def test_the_shipped_seccomp_profile_is_docker_s_default_plus_the_namespace_rule():
    """deploy/seccomp-bwrap.json is Docker's default profile with one rule added (the
    calls bwrap makes), nothing else widened."""
    ours, default = json.loads(PROFILE.read_text()), json.loads(DOCKER_DEFAULT.read_text())
    added = [rule for rule in ours["syscalls"] if rule not in default["syscalls"]]
    assert [rule for rule in ours["syscalls"] if rule not in added] == default["syscalls"]
    assert {k: v for k, v in ours.items() if k != "syscalls"} == {k: v for k, v in default.items() if k != "syscalls"}
    assert len(added) == 1 and added[0]["action"] == "SCMP_ACT_ALLOW" and "args" not in added[0], added
    assert sorted(added[0]["names"]) == ["clone", "mount", "pivot_root", "umount2", "unshare"], added
    assert "bubblewrap" in added[0]["comment"]


def test_compose_and_k8s_give_only_the_service_the_sandbox_profile():
    """The service's containers run with deploy/seccomp-bwrap.json and AppArmor
    unconfined (the code model's sandboxes need both); nginx and Prometheus keep the
    runtime's defaults."""
    services = compose()["services"]
    for name in ("rewardserve", "rewardserve-gpu"):
        options = services[name]["security_opt"]
        assert "seccomp=./deploy/seccomp-bwrap.json" in options and "apparmor=unconfined" in options, name
    assert (ROOT / "deploy/seccomp-bwrap.json").is_file()
    for name in ("nginx", "prometheus", "grafana"):
        assert "security_opt" not in services[name], name
    deployment = next(
        d
        for f in sorted((ROOT / "deploy/k8s").glob("*.yaml"))
        for d in yaml.safe_load_all(f.read_text())
        if d["kind"] == "Deployment"
    )
    context = deployment["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    assert context["seccompProfile"] == {"type": "Localhost", "localhostProfile": "profiles/rewardserve-bwrap.json"}
    assert context["appArmorProfile"] == {"type": "Unconfined"}
    assert context["allowPrivilegeEscalation"] is False
