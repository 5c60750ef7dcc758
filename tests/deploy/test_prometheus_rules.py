"""The Prometheus alerting rules shipped beside the Grafana dashboard
(``deploy/prometheus/alerts.rules.yml``): referenced by ``prometheus.yml`` and mounted by the
compose file, valid for ``promtool check rules``/``check config``, and firing on planted series
(``promtool test rules tests/deploy/prometheus/alerts_test.yml``). promtool is Debian's
``prometheus`` package (``scripts/install-promtool.sh``, run by ``make test``)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from evalsvc.api._metrics import ALERT_KINDS, ALERT_SEVERITIES
from evalsvc.services.alerts import KINDS, SEVERITIES

REPO = Path(__file__).resolve().parents[2]
PROM = REPO / "deploy" / "prometheus"
RULES = PROM / "alerts.rules.yml"
UNIT = Path(__file__).resolve().parent / "prometheus" / "alerts_test.yml"


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool is missing: install Debian's prometheus package "
                    "(sh scripts/install-promtool.sh; make test does)")
    return found


def _run(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([_promtool(), *args], capture_output=True, text=True, cwd=cwd,
                          timeout=60)


def test_the_rules_are_wired_into_prometheus_and_compose() -> None:
    config = yaml.safe_load((PROM / "prometheus.yml").read_text())
    assert config["rule_files"] == [RULES.name]
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    mounts = compose["services"]["prometheus"]["volumes"]
    assert f"./deploy/prometheus/{RULES.name}:/etc/prometheus/{RULES.name}:ro" in mounts
    # The metric's label values are the service's closed sets.
    assert (tuple(ALERT_KINDS), tuple(ALERT_SEVERITIES)) == (KINDS, SEVERITIES)


def test_promtool_checks_the_rules_and_the_config() -> None:
    rules = _run("check", "rules", str(RULES))
    assert rules.returncode == 0, rules.stdout + rules.stderr
    assert "SUCCESS: 4 rules found" in rules.stdout
    config = _run("check", "config", "--syntax-only", str(PROM / "prometheus.yml"))
    assert config.returncode == 0, config.stdout + config.stderr


def test_the_rules_fire_on_planted_series() -> None:
    result = _run("test", "rules", UNIT.name, cwd=UNIT.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
