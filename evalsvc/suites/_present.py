"""What a suite kind gives the views: findings, flips, slices and its dashboard view.

Contract: plain data, no I/O. A kind returns ``Finding`` objects (title, severity, Markdown
text, structured data) from its report entry, a ``Chart`` list and any JSON-able values for its
dashboard page, and a Jinja template that lives beside the kind. ``evalsvc.reports`` and the
dashboard render whatever a kind returns; they know no kind by name.

The data a view model needs from the store reaches the kind as callables in ``ViewInput``
(suites never touch the database): light rows of scores and a few ``data`` fields, or the
full samples of baseline and candidate.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from evalsvc.domain import Sample

Severity = Literal["fail", "warn", "info"]

Scored = tuple[str, str, int, "float | None", dict[str, Any]]
"""``(endpoint, item_id, repeat, score, {field: value})``: one sample without its output."""


@dataclass
class Finding:
    """One finding of one suite for one candidate.

    ``markdown`` is the text every view shows (the Markdown report verbatim; the dashboard
    renders it as HTML with raw HTML disabled); ``data`` is the structured form for the JSON
    report and programs. ``severity`` ``fail`` marks what made a gate fail (the dashboard opens
    it), ``warn`` what a reader must not miss, ``info`` the rest."""

    title: str
    markdown: list[str] = field(default_factory=list)
    severity: Severity = "info"
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "severity": self.severity,
            "text": "\n".join(self.markdown).strip(),
            "data": self.data,
        }


@dataclass
class Chart:
    """A chart of the dashboard page, drawn by the dashboard's generic script.

    ``type``: ``bar`` and ``line`` draw one value per label and series; ``scatter`` draws points
    ``[label index, y]`` over the labels. A series' ``color`` names a palette entry
    (``baseline``, ``candidate``, ``pass``, ``fail``) or is a CSS colour."""

    id: str
    type: Literal["bar", "line", "scatter"]
    title: str
    labels: list[str]
    series: list[dict[str, Any]]
    y_name: str = ""
    x_name: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "type": self.type, "title": self.title, "labels": self.labels,
            "series": self.series, "y_name": self.y_name, "x_name": self.x_name,
        }


@dataclass
class ViewInput:
    """What the dashboard hands a kind's ``view_model``: the suite's report entry for one
    candidate (``None`` before the report exists) and the stored samples, fetched on demand."""

    suite: str
    role: str
    entry: dict[str, Any] | None
    alpha: float
    scores: Callable[[tuple[tuple[str, str], ...]], list[Scored]]
    """Rows of every endpoint's samples with the named ``data`` fields (``(name, "int" |
    "float" | "str")``), without outputs: cheap for thousands of samples."""
    samples: Callable[[], list[Sample]]
    """Every stored sample of the suite (outputs and ``data`` included)."""

    @property
    def details(self) -> dict[str, Any]:
        return dict((self.entry or {}).get("details") or {})

    def pairs(self) -> list[tuple[Sample, Sample]]:
        """(baseline, candidate) samples of the same (item, repeat), in key order."""
        rows = self.samples()
        base = {(s.item_id, s.repeat): s for s in rows if s.endpoint == "baseline"}
        cand = {(s.item_id, s.repeat): s for s in rows if s.endpoint == self.role}
        return [(base[k], cand[k]) for k in sorted(base.keys() & cand.keys())]

    def score_pairs(self, fields: tuple[tuple[str, str], ...] = ()) -> list[tuple[Scored, Scored]]:
        """Light (baseline, candidate) rows of the same (item, repeat), in key order."""
        rows = self.scores(fields)
        base = {(r[1], r[2]): r for r in rows if r[0] == "baseline"}
        cand = {(r[1], r[2]): r for r in rows if r[0] == self.role}
        return [(base[k], cand[k]) for k in sorted(base.keys() & cand.keys())]


def pct(x: Any) -> str:
    """A rate as a whole percentage, ``—`` when missing."""
    return "—" if isinstance(x, bool) or not isinstance(x, (int, float)) else f"{100 * x:.0f}%"


def num(x: Any, digits: int = 3) -> str:
    """A number for tables (floats to ``digits`` places), ``—`` when missing."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return "—"
    return f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def flip_counts_finding(details: dict[str, Any]) -> list[Finding]:
    """The paired gate's flip counts (regression = baseline correct, candidate wrong), for kinds
    whose items are scored right or wrong ("Accuracy is Not All You Need", arXiv 2407.09141)."""
    counts = details.get("counts")
    if not isinstance(counts, dict) or "regressions" not in counts:
        return []
    worse, better = counts.get("regressions") or 0, counts.get("improvements") or 0
    agree = (counts.get("both_correct") or 0) + (counts.get("both_wrong") or 0)
    total = agree + worse + better
    line = f"Flips: {worse} correct → incorrect, {better} incorrect → correct"
    if total:
        line += f"; outcomes agree on {agree} of {total} items ({pct(agree / total)})"
    return [Finding(
        title=f"{worse} correct → incorrect, {better} incorrect → correct",
        markdown=[line + ".", ""],
        severity="warn" if worse > better else "info",
        data={"correct_to_incorrect": worse, "incorrect_to_correct": better, "agree": agree},
    )]


def markdown_table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """A GitHub-flavoured Markdown table (cells as given; ``|`` in a cell is escaped)."""

    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|")

    return [
        "| " + " | ".join(cell(c) for c in columns) + " |",
        "|" + "---|" * len(columns),
        *("| " + " | ".join(cell(v) for v in r) + " |" for r in rows),
    ]
