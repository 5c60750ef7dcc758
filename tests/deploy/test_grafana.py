"""The Grafana dashboard reads only metrics that exist: every metric name in its PromQL
(panels and template variables) is on the real ``/metrics`` of an app over a store with a real
run (a local endpoint against itself), and has at least one series there."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from evalsvc.webapp import create_app
from tests.fixtures.loopback import uvicorn_app

from .conftest import REPO_ROOT

DASHBOARD = REPO_ROOT / "dashboards" / "grafana" / "evalsvc.json"

# PromQL words that are not metric names (functions, aggregations, keywords).
PROMQL_WORDS = {
    "sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk", "quantile",
    "count_values", "group", "by", "without", "on", "ignoring", "group_left", "group_right",
    "bool", "and", "or", "unless", "offset", "rate", "irate", "increase", "delta", "idelta",
    "histogram_quantile", "time", "vector", "scalar", "abs", "clamp_min", "clamp_max",
    "label_values", "label_replace", "absent", "changes", "resets", "deriv", "le",
}


def _exprs(node: Any) -> list[str]:
    """Every PromQL string of the dashboard: panel targets and template-variable queries."""
    out: list[str] = []
    if isinstance(node, dict):
        if isinstance(node.get("expr"), str):
            out.append(node["expr"])
        query = node.get("query")
        if node.get("type") == "query" and isinstance(query, dict) and isinstance(query.get("query"), str):
            out.append(query["query"])
        for value in node.values():
            out.extend(_exprs(value))
    elif isinstance(node, list):
        for value in node:
            out.extend(_exprs(value))
    return out


def metric_names(expr: str) -> set[str]:
    """Metric names in one PromQL expression (also label_values(metric{...}, label))."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # range selectors
    text = re.sub(r"\$\w+", "", text)  # Grafana variables ($suite, $__interval)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    text = re.sub(r",\s*[a-z_]+\s*\)", ")", text)  # label_values(metric, label)
    words = set(re.findall(r"\b[a-zA-Z_:][a-zA-Z0-9_:]*\b", text))
    return {w for w in words if w not in PROMQL_WORDS and not re.fullmatch(r"\d+[smhdwy]?", w)}


def test_metric_name_extraction() -> None:
    assert metric_names('histogram_quantile(0.9, sum by (le) (rate(evalsvc_x_bucket{a="b"}[5m])))') == {
        "evalsvc_x_bucket"
    }
    assert metric_names('label_values(evalsvc_gate_delta{baseline=~"$baseline"}, candidate)') == {
        "evalsvc_gate_delta"
    }
    assert metric_names("time() - max by (suite) (evalsvc_t)") == {"evalsvc_t"}


def test_dashboard_is_valid_grafana_json() -> None:
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] and dash["title"] and dash["schemaVersion"] >= 36
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for p in dash["panels"]:
        grid = p["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, p["title"]
        for t in p.get("targets", []):
            assert t["expr"].count("(") == t["expr"].count(")"), t["expr"]
    names = {v["name"] for v in dash["templating"]["list"]}
    used = set(re.findall(r"\$(\w+)", DASHBOARD.read_text())) - {"__all", "__interval"}
    assert used <= names, used - names


@pytest.mark.slow
@pytest.mark.endpoints
def test_every_dashboard_metric_is_exposed(real_run_db: str) -> None:
    dash = json.loads(DASHBOARD.read_text())
    used = set().union(*(metric_names(e) for e in _exprs(dash)))
    assert {"evalsvc_gate_verdict_code", "evalsvc_gate_delta", "evalsvc_queue_depth"} <= used
    with uvicorn_app(create_app(real_run_db, auth=True)) as base:
        # a probe first, as in production: the request counter has series once a request was served
        assert httpx.get(f"{base}/healthz", timeout=60).status_code == 200
        text = httpx.get(f"{base}/metrics", timeout=60).text
    series: dict[str, int] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            series[s.name] = series.get(s.name, 0) + 1
    missing = sorted(n for n in used if n not in series)
    assert missing == [], f"dashboard metrics not on /metrics: {missing}"
    # and the real run shows up in the gate figures the dashboard plots
    assert series["evalsvc_gate_delta"] >= 1 and series["evalsvc_endpoint_samples"] >= 1
    assert "evalsvc_queue_depth 1.0" in text

