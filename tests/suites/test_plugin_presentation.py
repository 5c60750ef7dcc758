"""A plugin kind (``tests/fixtures/plugin_kind``, its own distribution and entry point) gets the
same presentation as a built-in one, with no line under ``evalsvc/`` naming it: findings and
headline in the Markdown, JSON and JUnit views, its template read beside its module."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from evalsvc.reports import build_report, suite_findings, to_junit, to_markdown
from evalsvc.suites import suite_kinds
from tests.reports.test_reports import _result


def _echo_entry(report: dict[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = report["candidates"][1]["suites"][0]
    for key in ("headline", "findings"):  # build_report wrote the needle kind's
        entry.pop(key, None)
    entry.update(suite="echo-x", kind="echo", details={
        **entry["details"],
        "by_template": [
            {"template": "plain", "n": 8, "baseline": 1.0, "candidate": 0.25},
            {"template": "sentence", "n": 8, "baseline": 0.5, "candidate": 0.5},
        ],
    })
    return entry


def test_plugin_kind_is_registered_with_its_template(echo_kind: dict[str, str]) -> None:
    cls = suite_kinds()["echo"]
    assert cls.__module__ == "evalsvc_echo_kind"
    source = cls.template_source()
    assert source is not None and 'id="echo-templates"' in source
    assert cls.shows_flips() and cls.slice_label({"template": "sentence"}) == "template sentence"


def test_plugin_findings_reach_every_report_view(echo_kind: dict[str, str]) -> None:
    report = build_report(_result())
    entry = _echo_entry(report)
    titles = [f.title for f in suite_findings(entry)]
    assert "echo accuracy by template" in titles
    md = to_markdown(report)
    assert "Echo accuracy by template (baseline / candidate):" in md
    assert "| plain | 8 | 100% | 25% |" in md
    assert "### echo-x (echo)" in md
    junit = ET.fromstring(to_junit({**report}).split("\n", 1)[1])
    outs = [tc.findtext("system-out") or "" for tc in junit.iter("testcase")
            if tc.get("name") == "echo-x"]
    assert outs and "echo: plain 100% → 25%, sentence 50% → 50%" in outs[0]
    assert "| plain | 8 | 100% | 25% |" in outs[0]
