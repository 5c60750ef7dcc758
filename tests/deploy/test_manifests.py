"""The deployment files hold together (Docker cannot run here, so they are validated instead):
docker-compose.yml against the compose-spec JSON schema and structurally (services, depends_on,
healthchecks, volumes, ports, env names evalsvc reads), the kustomize base (files, resources,
env names, probes and ports; ``kubectl kustomize`` where kubectl is installed), the Dockerfile,
the Prometheus and Grafana provisioning, and the CI examples against their JSON schemas."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalsvc.settings import Settings

from .conftest import REPO_ROOT

COMPOSE = REPO_ROOT / "docker-compose.yml"
K8S = REPO_ROOT / "deploy" / "k8s"
SETTINGS_VARS = {f"EVALSVC_{name.upper()}" for name in Settings.model_fields}
# Environment the tests and the CLI read that are not process settings of a deployed service.
CLIENT_VARS = {"EVALSVC_TOKEN"}


def _compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(data, dict)
    return data


def _check_jsonschema(schema: str, *files: Path) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("check-jsonschema")
    if not exe.exists():
        pytest.skip("check-jsonschema is not installed (pip install -e '.[dev]')")
    return subprocess.run(
        [str(exe), "--builtin-schema", schema, *map(str, files)],
        capture_output=True, text=True, timeout=120,
    )


def _env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {str(k): str(v) for k, v in env.items()}


# --------------------------------------------------------------------------- compose


def test_compose_matches_the_compose_spec_schema(tmp_path: Path) -> None:
    r = _check_jsonschema("vendor.compose-spec", COMPOSE)
    assert r.returncode == 0, r.stdout + r.stderr
    # the validator does reject a broken file (so the pass above means something)
    bad = _compose()
    bad["services"]["api"]["depends_on"]["migrate"]["condition"] = "when_it_feels_like_it"
    bad["services"]["worker"]["deploy"]["replicas"] = "two"
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(yaml.safe_dump(bad))
    r = _check_jsonschema("vendor.compose-spec", broken)
    assert r.returncode != 0 and "condition" in r.stdout + r.stderr


def test_compose_topology() -> None:
    services = _compose()["services"]
    assert {"postgres", "migrate", "api", "worker", "prometheus", "grafana"} <= set(services)
    default = {n for n, s in services.items() if not s.get("profiles")}
    gpu = {n for n, s in services.items() if "gpu" in (s.get("profiles") or [])}
    assert default == {"postgres", "migrate", "api", "worker", "prometheus", "grafana"}
    assert gpu == {"vllm-bf16", "vllm-fp8-kv", "nightly"}

    # migrate runs once, after postgres is healthy; every other evalsvc service waits for it
    migrate = services["migrate"]
    assert migrate["command"] == ["db", "upgrade"] and migrate["restart"] == "no"
    assert migrate["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in ("api", "worker", "nightly"):
        assert services[name]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert services["worker"]["deploy"]["replicas"] == 2
    assert services["worker"]["command"][0] == "worker"
    assert services["api"]["command"][:2] == ["api", "serve"]
    assert services["prometheus"]["depends_on"]["api"]["condition"] == "service_healthy"
    assert services["grafana"]["depends_on"]["prometheus"]["condition"] == "service_healthy"
    for name in ("vllm-bf16", "vllm-fp8-kv"):
        assert services["nightly"]["depends_on"][name]["condition"] == "service_healthy"

    # every depends_on condition on service_healthy points at a service with a healthcheck
    for name, svc in services.items():
        for dep, cond in (svc.get("depends_on") or {}).items():
            assert dep in services, f"{name} depends on unknown {dep}"
            if cond["condition"] == "service_healthy":
                check = services[dep].get("healthcheck") or {}
                assert check.get("test") and not check.get("disable"), f"{dep} has no healthcheck"
    # roles that serve no HTTP turn the image's /healthz HEALTHCHECK off
    for name in ("migrate", "worker", "nightly"):
        assert services[name]["healthcheck"] == {"disable": True}
    assert "/healthz" in " ".join(services["api"]["healthcheck"]["test"])
    assert "pg_isready" in " ".join(services["postgres"]["healthcheck"]["test"])


def test_compose_gpu_profile_is_the_seed_setup() -> None:
    services = _compose()["services"]
    base = " ".join(services["vllm-bf16"]["command"])
    cand = " ".join(services["vllm-fp8-kv"]["command"])
    assert "--kv-cache-dtype fp8" in cand and "--kv-cache-dtype" not in base
    assert base.split()[0] == cand.split()[0]  # the same model
    assert all(s.strip('"') for s in (base, cand))
    for name in ("vllm-bf16", "vllm-fp8-kv"):
        assert services[name]["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
        assert "8000" in " ".join(services[name]["command"])
    script = REPO_ROOT / "deploy" / "compose" / "register-gpu.sh"
    text = script.read_text()
    assert "http://vllm-bf16:8000/v1" in text and "http://vllm-fp8-kv:8000/v1" in text
    assert "schedules add nightly-fp8-kv" in text and "--candidate gpu-fp8-kv" in text
    r = subprocess.run(["sh", "-n", str(script)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    # the egress policy lets runs reach exactly the two vLLM services by default
    allowed = _env(services["worker"])["EVALSVC_ALLOWED_ENDPOINTS"]
    default = re.fullmatch(r"\$\{EVALSVC_ALLOWED_ENDPOINTS:-(.*)\}", allowed)
    assert default is not None and set(default.group(1).split(",")) == {"vllm-bf16", "vllm-fp8-kv"}


def test_compose_env_names_are_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    services = _compose()["services"]
    known = SETTINGS_VARS | {"EVALSVC_ALLOWED_ENDPOINTS"}  # the egress setting (its own helper)
    for name, svc in services.items():
        for var in _env(svc):
            if var.startswith("EVALSVC_"):
                assert var in known, f"{name}: {var} is not read by evalsvc.settings"
    # and the values parse: Settings accepts the compose environment of the api service
    for var, value in _env(services["api"]).items():
        if var in SETTINGS_VARS:
            monkeypatch.setenv(var, re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", value))
    settings = Settings()
    assert settings.database_url.startswith("postgresql+psycopg://evalsvc:")
    assert "@postgres:5432/evalsvc" in settings.database_url
    assert str(settings.home) == "/var/lib/evalsvc"


def test_compose_volumes_files_and_ports() -> None:
    data = _compose()
    declared = set(data["volumes"])
    used: set[str] = set()
    for name, svc in data["services"].items():
        for vol in svc.get("volumes") or []:
            source = vol.split(":", 1)[0]
            if source.startswith("."):
                assert (REPO_ROOT / source).exists(), f"{name}: {source} does not exist"
            else:
                used.add(source)
    assert used == declared, (used, declared)
    assert "pgdata" in used
    ports = {
        p.rsplit(":", 1)[-1]: name for name, svc in data["services"].items() for p in svc.get("ports") or []
    }
    assert ports == {"8080": "api", "9090": "prometheus", "3000": "grafana"}
    # the api listens where compose publishes it, Prometheus scrapes and the image checks
    assert data["services"]["api"]["command"][-1] == "8080"
    prom = yaml.safe_load((REPO_ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    (job,) = prom["scrape_configs"]
    assert job["static_configs"][0]["targets"] == ["api:8080"] and job["metrics_path"] == "/metrics"


def test_grafana_provisioning() -> None:
    prov = REPO_ROOT / "deploy" / "grafana" / "provisioning"
    (ds,) = yaml.safe_load((prov / "datasources" / "prometheus.yml").read_text())["datasources"]
    assert ds["type"] == "prometheus" and ds["url"] == "http://prometheus:9090"
    (provider,) = yaml.safe_load((prov / "dashboards" / "evalsvc.yml").read_text())["providers"]
    grafana = _compose()["services"]["grafana"]
    mounts = dict(v.split(":")[:2] for v in grafana["volumes"] if v.startswith("."))
    assert mounts["./dashboards/grafana"] == provider["options"]["path"]
    assert mounts["./deploy/grafana/provisioning"] == "/etc/grafana/provisioning"
    import json

    dash = json.loads((REPO_ROOT / "dashboards" / "grafana" / "evalsvc.json").read_text())
    ds_var = next(v for v in dash["templating"]["list"] if v["type"] == "datasource")
    assert ds_var["current"]["value"] == ds["uid"]


# --------------------------------------------------------------------------- Dockerfile


def test_dockerfile() -> None:
    text = (REPO_ROOT / "Dockerfile").read_text()
    stages = re.findall(r"^FROM\s+(\S+)(?:\s+AS\s+(\S+))?", text, flags=re.M | re.I)
    assert [s[1] for s in stages] == ["build", "runtime"]
    assert 'ARG PYTHON_IMAGE=python:3.11-slim' in text
    assert re.search(r"^COPY --from=build ", text, flags=re.M)
    assert re.search(r"^USER 10001", text, flags=re.M)
    assert re.search(r"^HEALTHCHECK .*\n?.*/healthz", text, flags=re.M)
    assert re.search(r'^ENTRYPOINT \["evalsvc"\]', text, flags=re.M)
    # everything the build stage copies exists and is let through .dockerignore
    copied = re.findall(r"^COPY (?!--from)(.+?) \S+$", text, flags=re.M)
    ignore = (REPO_ROOT / ".dockerignore").read_text().split()
    for line in copied:
        for src in line.split():
            assert (REPO_ROOT / src).exists(), src
            assert f"!{src}" in ignore, f"{src} is excluded from the build context"
    # the image's default command and the compose/k8s api command use the same port
    assert 'CMD ["api", "serve", "--host", "0.0.0.0", "--port", "8080"]' in text
    assert "127.0.0.1:8080/healthz" in text


# --------------------------------------------------------------------------- kustomize


def _k8s_resources() -> list[dict[str, Any]]:
    kust = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    docs: list[dict[str, Any]] = []
    for rel in kust["resources"]:
        path = K8S / rel
        assert path.is_file(), f"kustomization references missing {rel}"
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


def _containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = doc["spec"]["template"]["spec"]
    return list(spec.get("containers", [])) + list(spec.get("initContainers", []))


def test_kustomize_base_resources() -> None:
    docs = _k8s_resources()
    by_kind = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert by_kind == {
        ("ConfigMap", "evalsvc-config"),
        ("Job", "evalsvc-migrate"),
        ("Deployment", "evalsvc-api"),
        ("Service", "evalsvc-api"),
        ("Deployment", "evalsvc-worker"),
    }
    for d in docs:
        assert d["apiVersion"] in ("v1", "apps/v1", "batch/v1"), d["kind"]
    config = next(d for d in docs if d["kind"] == "ConfigMap")
    for var in config["data"]:
        assert var in SETTINGS_VARS | {"EVALSVC_ALLOWED_ENDPOINTS"}, var
    for value in config["data"].values():
        assert isinstance(value, str)  # ConfigMap data must be strings
    workloads = [d for d in docs if d["kind"] in ("Deployment", "Job")]
    args = {d["metadata"]["name"]: _containers(d)[0]["args"] for d in workloads}
    assert args["evalsvc-migrate"] == ["db", "upgrade"]
    assert args["evalsvc-api"][:2] == ["api", "serve"] and args["evalsvc-worker"][0] == "worker"
    for d in workloads:
        pod = d["spec"]["template"]
        if d["kind"] == "Deployment":
            assert d["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
        for c in _containers(d):
            assert c["image"] == "evalsvc"
            assert c["resources"]["requests"]["cpu"] and c["resources"]["requests"]["memory"]
            refs = [e["configMapRef"]["name"] for e in c.get("envFrom", []) if "configMapRef" in e]
            assert refs == ["evalsvc-config"]
            env = {e["name"]: e for e in c.get("env", [])}
            assert env["EVALSVC_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {
                "name": "evalsvc-database", "key": "url"
            }
            for name in env:
                assert name in SETTINGS_VARS, name
            mounts = {m["name"] for m in c.get("volumeMounts", [])}
            assert mounts <= {v["name"] for v in pod["spec"].get("volumes", [])}


def test_kustomize_api_probes_and_service() -> None:
    docs = _k8s_resources()
    api = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "evalsvc-api")
    svc = next(d for d in docs if d["kind"] == "Service")
    (c,) = _containers(api)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"http": int(c["args"][c["args"].index("--port") + 1])}
    assert c["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    # liveness must not depend on the database (an outage would restart every pod)
    assert "httpGet" not in c["livenessProbe"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        port = next(iter(v for k, v in c[probe].items() if k in ("httpGet", "tcpSocket")))["port"]
        assert port in ports
    assert svc["spec"]["selector"].items() <= api["spec"]["template"]["metadata"]["labels"].items()
    (sp,) = svc["spec"]["ports"]
    assert sp["targetPort"] in ports


def test_kubectl_kustomize_builds_the_base() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed: the kustomize build is not checked here")
    r = subprocess.run([kubectl, "kustomize", str(K8S)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    built = [d for d in yaml.safe_load_all(r.stdout) if d]
    assert {d["kind"] for d in built} == {"ConfigMap", "Job", "Deployment", "Service"}
    for d in built:
        assert d["metadata"]["labels"]["app.kubernetes.io/part-of"] == "evalsvc"
        if d["kind"] in ("Deployment", "Job"):
            assert {c["image"] for c in _containers(d)} == {"evalsvc:latest"}


# --------------------------------------------------------------------------- CI examples


def test_ci_examples_match_their_schemas() -> None:
    gha = REPO_ROOT / "examples" / "ci" / "github-actions.yml"
    gitlab = REPO_ROOT / "examples" / "ci" / "gitlab-ci.yml"
    r = _check_jsonschema("vendor.github-workflows", gha)
    assert r.returncode == 0, r.stdout + r.stderr
    r = _check_jsonschema("vendor.gitlab-ci", gitlab)
    assert r.returncode == 0, r.stdout + r.stderr
    for path in (gha, gitlab):
        text = path.read_text()
        assert "evalsvc compare" in text and "--server" in text
        assert "--junit" in text and "--markdown" in text


def test_ci_example_scripts_parse(tmp_path: Path) -> None:
    """The shell in both examples is valid sh/bash (GitHub expressions replaced by a word)."""
    gha = yaml.safe_load((REPO_ROOT / "examples" / "ci" / "github-actions.yml").read_text())
    steps = [s for job in gha["jobs"].values() for s in job["steps"] if "run" in s]
    assert len(steps) >= 4
    gitlab = yaml.safe_load((REPO_ROOT / "examples" / "ci" / "gitlab-ci.yml").read_text())
    job = gitlab["evalsvc-gate"]
    scripts = [re.sub(r"\$\{\{[^}]*\}\}", "X", s["run"]) for s in steps]
    scripts.append("\n".join([*job["before_script"], *job["script"]]))
    for i, text in enumerate(scripts):
        path = tmp_path / f"script{i}.sh"
        path.write_text(text)
        r = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
        assert r.returncode == 0, f"{text}\n{r.stderr}"
    assert job["artifacts"]["reports"]["junit"] == "junit.xml"


def _gha_comment_step() -> dict[str, Any]:
    gha = yaml.safe_load((REPO_ROOT / "examples" / "ci" / "github-actions.yml").read_text())
    (step,) = [s for s in gha["jobs"]["gate"]["steps"] if "sticky comment" in s.get("name", "")]
    return step  # type: ignore[no-any-return]


def test_github_example_updates_one_sticky_comment(tmp_path: Path) -> None:
    """The bot's earlier comment is found by its hidden marker (the step's own jq filter, run by
    the real jq over a comment listing shaped as GitHub's) and PATCHed; only without one is a
    comment POSTed."""
    step = _gha_comment_step()
    run = step["run"]
    assert step["env"]["MARKER"].startswith("<!-- evalsvc-report")
    assert "--method PATCH" in run and "issues/comments/$id" in run
    assert run.index("--method PATCH") < run.index("--method POST")  # update first, else create
    jq = shutil.which("jq")
    if jq is None:
        pytest.skip("jq is not installed (Debian package jq)")
    (jq_filter,) = re.findall(r"--jq '([^']+)'", run)
    marker = "<!-- evalsvc-report: evalsvc release gate -->"
    comments = [
        {"id": 1, "user": {"login": "someone"}, "body": f"{marker}\nquoted by a person"},
        {"id": 2, "user": {"login": "github-actions[bot]"}, "body": "another bot comment"},
        {"id": 3, "user": {"login": "github-actions[bot]"}, "body": f"{marker}\n## evalsvc"},
        {"id": 4, "user": {"login": "github-actions[bot]"},
         "body": "<!-- evalsvc-report: another gate -->\n## evalsvc"},
    ]
    listing = tmp_path / "comments.json"
    listing.write_text(json.dumps(comments))
    r = subprocess.run([jq, jq_filter, str(listing)], capture_output=True, text=True,
                       env={"MARKER": marker, "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["3"]


def test_gitlab_example_updates_one_sticky_note() -> None:
    """The merge-request note script compiles, finds its note by marker and author, pages
    through the notes, and PUTs before it would POST."""
    gitlab = yaml.safe_load((REPO_ROOT / "examples" / "ci" / "gitlab-ci.yml").read_text())
    script = "\n".join(gitlab["evalsvc-gate"]["script"])
    (python,) = re.findall(r"<<'PY'\n(.*?)\nPY\n", script, flags=re.S)
    compile(python, "gitlab-ci.yml note script", "exec")
    assert "<!-- evalsvc-report" in python and 'n["body"].startswith(marker)' in python
    assert 'n["author"]["id"] == me' in python and "page += 1" in python
    assert '"PUT"' in python and '"POST"' in python
