"""The terminal and file views of a report, shared by ``compare`` (local and ``--server``) and
``gate-logs``: progress bars, the verdict table, the headlines and reasons, the report files.

Contract: every string that came from an endpoint, a suite file or the store is escaped for the
terminal (``_safe.term``); ``write_outputs`` writes the files asked for (``--json -`` alone owns
stdout).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    ProgressColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.progress import Progress as RichProgress
from rich.table import Column, Table

from evalsvc.cli._safe import term

from ._common import VERDICT_STYLE, err

#: What a bar's row needs besides its description: the bar at its narrowest (4), the counts
#: up to "1260/1260", the elapsed time, "left" and the time left, and the five gaps between.
_BAR_ROW_FIXED = 4 + 9 + 7 + 4 + 7 + 5


def progress_columns(width: int) -> tuple[ProgressColumn, ...]:
    """The bars' columns for a console ``width`` wide: the counts, the elapsed time and the
    time left always whole (rich's estimate from the bar's recent rate, "-:--:--" until the
    first items finish); the description cut with "…" and the bar narrowed to fit. Rich's own
    defaults shrink every column alike, so an 80-column CI log read "10/… 0:00… left 0:00…"."""
    whole = Column(no_wrap=True)
    return (
        TextColumn("{task.description}", table_column=Column(
            no_wrap=True, overflow="ellipsis", max_width=max(16, width - _BAR_ROW_FIXED))),
        BarColumn(bar_width=min(40, max(4, width - 90))),
        MofNCompleteColumn(table_column=whole),
        TimeElapsedColumn(table_column=whole),
        TextColumn("left", table_column=whole),
        TimeRemainingColumn(table_column=whole),
    )


def suite_position(order: Sequence[str], suite: str) -> str:
    """``"suite 2/5 "`` for the second of five suites in execution order ("" when unknown): how
    the bars and the plain progress lines begin."""
    return f"suite {order.index(suite) + 1}/{len(order)} " if suite in order else ""


class RichProgressBars:
    """One progress bar per (suite, endpoint), on stderr.

    Answers are counted here and handed to rich at most every :data:`FLUSH_S` and when a bar
    reaches its total: a rich ``advance`` per answer (a lock and a speed sample each) was 1–2% of
    the event loop's time against a zero-latency endpoint, for a bar redrawn twice a second.
    """

    FLUSH_S = 0.25

    def __init__(self, progress: RichProgress, labels: dict[str, str]) -> None:
        self.progress, self.labels = progress, labels
        self.tasks: dict[tuple[str, str], TaskID] = {}
        self.order: list[str] = []
        self._left: dict[tuple[str, str], int] = {}
        self._pending: dict[tuple[str, str], int] = {}
        self._flushed = 0.0

    def suites(self, names: Sequence[str]) -> None:
        """Every suite of the run in execution order (bars then read "suite 2/5")."""
        self.order = list(names)

    def planned(
        self, suite: str, roles: Sequence[str], n_items: int, n_done: dict[str, int]
    ) -> None:
        which = suite_position(self.order, suite)
        for role in roles:
            self.tasks[(suite, role)] = self.progress.add_task(
                f"{which}{term(suite)} · {term(self.labels.get(role, role))}",
                total=n_items,
                completed=n_done.get(role, 0),
            )
            self._left[(suite, role)] = n_items - n_done.get(role, 0)

    def advance(self, suite: str, role: str, error: bool = False) -> None:
        key = (suite, role)
        if key not in self.tasks:
            return
        self._pending[key] = self._pending.get(key, 0) + 1
        self._left[key] -= 1
        now = time.monotonic()
        if self._left[key] <= 0 or now - self._flushed >= self.FLUSH_S:
            self.flush(now)

    def flush(self, now: float | None = None) -> None:
        """Hand every pending count to rich (also called when the bars stop)."""
        for key, n in self._pending.items():
            if n:
                self.progress.advance(self.tasks[key], n)
        self._pending.clear()
        self._flushed = time.monotonic() if now is None else now

    def message(self, text: str) -> None:
        # Above the bars with the time, as ``console.log`` would print it, but without its
        # right-hand column naming this file and line (evalsvc's internals, not the user's).
        stamp = time.strftime("%H:%M:%S")
        self.progress.console.print(f"[log.time]\\[{stamp}][/] {term(text)}", highlight=False)


def _candidate_cell(cand: dict[str, Any]) -> str:
    """``endpoint_label`` on two lines: where (registered name or host:port), then the model."""
    from evalsvc.reports import endpoint_label

    label = endpoint_label(cand)
    model = cand.get("model")
    suffix = f" ({model})"
    if model and label.endswith(suffix):
        return f"{label[: -len(suffix)]}\n{model}"
    return label


def verdict_table(report: dict[str, Any]) -> Table:
    from evalsvc.reports import summary_rows

    table = Table(title=f"evalsvc · run {term(report['run_id'])}", show_lines=False)
    # Compact enough for an 80-column CI log; the MDE is in the JSON and Markdown reports. The
    # margin is the one the gate used (the suite's policy, or the submitter's tighter one); a
    # threshold gate (drift) shows the metric, the CI of the metric itself and the threshold.
    cols = ("candidate", "suite", "metric", "base", "cand", "Δ [CI]", "gate", "p (NI)", "n",
            "verdict")
    # The candidate cell holds the endpoint and its served model on two lines (endpoint_label
    # puts them on one): folded into a narrow column, "127.0.0.1:8101 (smollm2-135m-gguf-q8_0-kv)"
    # broke over three lines mid-word at 160 columns.
    cells = [_candidate_cell(cand) for cand in report["candidates"] for _ in cand["suites"]]
    for col in cols:
        table.add_column(col, overflow="fold")
    entries = [s for cand in report["candidates"] for s in cand["suites"]]
    for r, s, cell in zip(summary_rows(report), entries, cells, strict=True):
        v = r["verdict"].split(" ")[0]
        # Rows that block a pass, or are not gated, are explained below the table.
        marked = v != "pass" or not s.get("gated", True)
        delta_ci = (
            f"value {r['ci']}" if r["gate_type"] == "threshold" else f"{r['delta']} {r['ci']}"
        )
        # Candidate and suite names and the model id are untrusted text: escaped for rich.
        table.add_row(
            term(cell),
            *(term(r[k]) for k in ("suite", "metric", "baseline", "candidate_value")),
            term(delta_ci),
            term(r["margin"]),
            term(r["p"]),
            term(r["n"]),
            # A row that is not gated says so (its gate reads "inconclusive", which would
            # suggest it could have been anything else): the speed rows of every run.
            (f"[{VERDICT_STYLE.get(v, '')}]{term(r['verdict'])}[/]" if s.get("gated", True)
             else "[dim]not gated[/]") + (" *" if marked else ""),
        )
    from evalsvc.reports import skipped_of

    for gone in skipped_of(report):
        # Not run on these endpoints: no numbers; the reason is printed below the table.
        table.add_row("all", term(gone.get("suite")), *("—" for _ in range(7)), "skipped *")
    return table


def print_headlines(report: dict[str, Any]) -> None:
    """Where and how much, one line per suite (flips, KLD, determinism rates, speed gain), then
    why each candidate reads its verdict (the report's ``reasons``)."""
    from evalsvc.reports import endpoint_label, headline

    for cand in report["candidates"]:
        name = endpoint_label(cand)
        for s in cand["suites"]:
            line = headline(s)
            if line:
                err.print(f"  {term(name)} · {term(s['suite'])}: {term(line)}", highlight=False)
    for cand in report["candidates"]:
        name = endpoint_label(cand)
        reasons = cand.get("reasons") or []
        if not reasons:
            continue
        v = cand.get("verdict", "")
        err.print(
            f"* {term(name)}: [{VERDICT_STYLE.get(v, '')}]{term(v)}[/], because", highlight=False
        )
        for r in reasons:
            where = f"{r['suite']} · " if r.get("suite") else ""
            err.print(f"  - {term(where)}{term(r['code'])}: {term(r['message'])}", highlight=False)


# The report options `compare` and `gate-logs` share.
JsonOutOption = Annotated[
    str | None, typer.Option("--json", help="Write the JSON report to PATH, or - for stdout.")
]
JunitOption = Annotated[Path | None, typer.Option("--junit", help="Write JUnit XML to PATH.")]
MarkdownOption = Annotated[
    Path | None, typer.Option("--markdown", help="Write a Markdown report to PATH.")
]


def write_outputs(
    report: dict[str, Any], json_out: str | None, junit: Path | None, markdown: Path | None
) -> None:
    from evalsvc.reports import to_junit, to_markdown

    text = json.dumps(report, indent=2)
    if json_out == "-":
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    elif json_out:
        Path(json_out).write_text(text + "\n", encoding="utf-8")
    if junit:
        junit.write_text(to_junit(report), encoding="utf-8")
    if markdown:
        markdown.write_text(to_markdown(report), encoding="utf-8")


def print_verdict(verdict: str, run_id: str) -> None:
    err.print(f"verdict: [{VERDICT_STYLE.get(verdict, '')}]{term(verdict)}[/]  (run {term(run_id)})")
