"""Reports: the JSON report (the contract outside tools rely on), JUnit XML and Markdown."""

from evalsvc.reports._error import error_report
from evalsvc.reports._findings import findings, headline
from evalsvc.reports._render import (
    SCHEMA_VERSION,
    build_report,
    md_text,
    redact_report,
    summary_rows,
    to_junit,
    to_markdown,
)

__all__ = [
    "SCHEMA_VERSION",
    "build_report",
    "error_report",
    "findings",
    "headline",
    "md_text",
    "redact_report",
    "summary_rows",
    "to_junit",
    "to_markdown",
]
