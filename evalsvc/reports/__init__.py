"""Reports: the JSON report (the contract outside tools rely on), JUnit XML and Markdown.

The report's JSON Schema ships as ``report.schema.json`` (``report_schema()``); docs/report.md
describes every field.
"""

import json
from importlib import resources
from typing import Any

from evalsvc.reports._basis import basis, basis_lines, basis_of, parse_age, policy_refusals
from evalsvc.reports._error import error_report
from evalsvc.reports._findings import findings, headline, suite_findings
from evalsvc.reports._gatecols import is_threshold, reason_lines, reasons_of
from evalsvc.reports._render import (
    SCHEMA_VERSION,
    build_report,
    endpoint_label,
    redact_report,
    skipped_of,
    summary_rows,
    to_junit,
    to_markdown,
)
from evalsvc.reports._reuse import human_age, noise_text, reuse_lines, shown_endpoint
from evalsvc.reports._text import md_text


def report_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the JSON report, shipped in the package."""
    text = resources.files("evalsvc.reports").joinpath("report.schema.json").read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


__all__ = [
    "SCHEMA_VERSION",
    "basis",
    "basis_lines",
    "basis_of",
    "build_report",
    "endpoint_label",
    "error_report",
    "findings",
    "headline",
    "human_age",
    "shown_endpoint",
    "is_threshold",
    "md_text",
    "noise_text",
    "parse_age",
    "policy_refusals",
    "reason_lines",
    "reasons_of",
    "redact_report",
    "report_schema",
    "reuse_lines",
    "skipped_of",
    "suite_findings",
    "summary_rows",
    "to_junit",
    "to_markdown",
]
