"""Reports escape what an endpoint (or a submitter) chose: model ids, names, error texts,
warnings. The Markdown is rendered by a real CommonMark renderer (markdown-it-py, which rich
ships) and the JUnit parsed by a real XML parser."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from markdown_it import MarkdownIt

from evalsvc.reports import md_text, to_junit, to_markdown

HOSTILE_MODEL = "<script>alert(1)</script>[click](http://evil.example/x) | **x**\n# h1"
HOSTILE_ERROR = "boom <img src=x onerror=alert(2)> `code` \x1b[31mred\x00 ![i](http://e/i.png)"


def _report() -> dict[str, Any]:
    suite = {"suite": "needle-smoke", "kind": "needle", "verdict": "fail", "gated": True,
             "metric": "accuracy", "baseline": 0.9, "candidate": 0.5, "delta": -0.4,
             "ci": [-0.5, -0.3], "p_value": 0.5, "margin": 0.05, "n": 10, "n_errors": 0,
             "mde": None, "test": "paired non-inferiority",
             "details": {"reason": "endpoint said <b>no</b>"}}
    return {"run_id": "r1", "verdict": "error", "error": HOSTILE_ERROR,
            "warnings": [f"model {HOSTILE_MODEL} tokenizes differently"],
            "baseline": {"url": "http://base:8000/v1", "model": HOSTILE_MODEL},
            "candidates": [{"url": "http://c/v1", "model": HOSTILE_MODEL, "name": None,
                            "role": "candidate:0", "verdict": "fail", "suites": [suite]}]}


def test_markdown_renders_endpoint_text_inert() -> None:
    md = to_markdown(_report())
    html = MarkdownIt("commonmark").enable("table").render(md)
    assert "<script" not in html and "<img" not in html and "<b>" not in html
    assert "evil.example" in html and 'href="http://evil' not in html  # text, not a link
    assert "<h1>h1</h1>" not in html  # the newline did not start a heading
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html  # shown, escaped
    # The verdict table still has its 12 columns in every row: the model's "|" is escaped.
    rows = [line for line in md.splitlines() if line.startswith("| ")]
    assert rows and all(line.replace("\\|", "").count("|") == 13 for line in rows)


def test_md_text_keeps_plain_text_readable() -> None:
    assert md_text("smollm2-135m-bf16") == "smollm2-135m-bf16"
    assert md_text("a\nb") == "a b"


def test_junit_stays_parseable_xml_with_control_characters() -> None:
    xml = to_junit(_report())
    root = ET.fromstring(xml)  # ElementTree alone would have written \x1b and \x00 raw
    error = root.find("./testsuite/testcase[@name='infrastructure']/error")
    assert error is not None and "<img src=x" in error.get("message", "")  # escaped, intact
    assert "\x00" not in xml and "\x1b" not in xml
    suite = root.find("testsuite")
    assert suite is not None and HOSTILE_MODEL.replace("\n", " ")[:20] in suite.get("name", "")


def test_markdown_reads_clean_where_nothing_could_form_markup() -> None:
    """Issue 50: the file read ``http\\://127.0.0.1:8102/v1``, ``q8\\_0`` and ``&lt;``. Now a
    URL is a code span (literal, never a link), an intraword ``_`` and a lone ``<`` or ``&``
    stay, and what could form markup is still escaped."""
    assert md_text("127.0.0.1:8102 (q8_0)") == "127.0.0.1:8102 (q8_0)"
    assert md_text("http://127.0.0.1:8102/v1") == "`http://127.0.0.1:8102/v1`"
    assert md_text("Δ < margin & more") == "Δ < margin & more"
    assert md_text("<b>x</b> _y_ *z* [a](b) | ~~s~~") == \
        "&lt;b>x&lt;/b> \\_y\\_ \\*z\\* \\[a\\](b) \\| \\~\\~s\\~\\~"
    report = _report()
    report["baseline"] = {"url": "http://127.0.0.1:8102/v1", "model": "smollm2-q8_0", "name": None}
    md = to_markdown(report)
    assert "at `http://127.0.0.1:8102/v1`" in md and "smollm2-q8_0" in md
    html = MarkdownIt("commonmark").enable("table").render(md)
    assert "<code>http://127.0.0.1:8102/v1</code>" in html and "smollm2-q8_0" in html


def test_an_error_before_any_gate_says_it_once_without_an_empty_table() -> None:
    from evalsvc.domain import EndpointRef, RunOptions
    from evalsvc.reports import error_report

    error = "nothing listens on 127.0.0.1:8100 — is the server running, is the port right?"
    md = to_markdown(error_report(
        baseline=EndpointRef(url="http://127.0.0.1:8100/v1"),
        candidates=[EndpointRef(url="http://127.0.0.1:8101/v1", name="q8_0")],
        error=error, options=RunOptions()))
    assert md.count("nothing listens on 127.0.0.1:8100") == 1, md
    assert "| Candidate |" not in md and "Run `None`" not in md, md
    assert "No run was recorded · baseline 127.0.0.1:8100 at `http://127.0.0.1:8100/v1`" in md
