"""``compare``'s bars on an 80-column log (a CI job's stderr, which rich sizes at 80): the counts,
the elapsed time and the time left stay whole; the description is cut with "…" instead.

A real ``compare`` process against the vLLM-shaped stub server (``benchmarks/stub_server.py``,
loopback); ``progress_columns`` laid out by rich itself at other widths.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console
from rich.progress import Progress

from evalsvc.cli._report import progress_columns
from tests.fixtures.db import REPO_ROOT

# A bar's row: description, bar, "done/total", elapsed, "left", time left (all whole).
ROW = re.compile(r"^(?P<desc>.+?) (?=[━╸╺])[━╸╺ ]+?(?P<done>\d+)/(?P<total>\d+) \d+:\d\d:\d\d left "
                 r"(?:\d+:\d\d:\d\d|-:--:--)$")


@pytest.fixture(scope="module")
def stub_urls() -> Iterator[list[str]]:
    sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
    try:
        import evaluator_speed
    finally:
        sys.path.remove(str(REPO_ROOT / "benchmarks"))
    with evaluator_speed.stub() as urls:
        yield urls


def test_an_80_column_log_keeps_the_counts_and_the_time_left(
    stub_urls: list[str], tmp_path: Path
) -> None:
    env = {**os.environ, "COLUMNS": "80", "EVALSVC_HOME": str(tmp_path / "home")}
    r = subprocess.run(
        [sys.executable, "-m", "evalsvc.cli.main", "compare", *stub_urls, "--suite",
         "reasoning-smoke", "--samples", "12", "--no-calibrate",
         "--database-url", f"sqlite:///{tmp_path / 'e.db'}"],
        capture_output=True, text=True, timeout=300, env=env,
    )
    assert r.returncode == 3, r.stderr  # the stub's baseline solves nothing: inconclusive
    bars = [m for line in r.stderr.splitlines() if (m := ROW.match(line))]
    assert len(bars) == 2, r.stderr
    assert all(m["done"] == m["total"] == "12" and len(m.string) <= 80 for m in bars)
    descs = [m["desc"] for m in bars]
    assert descs[0].startswith("suite 1/1 reasoning-smoke · baseline 127.0.")
    assert descs[1].startswith("suite 1/1 reasoning-smoke · candidate 127.0")
    assert all(d.endswith("…") for d in descs)  # cut to leave the numbers whole
    # Progress messages carry the time, not the source line that printed them.
    assert re.search(r"^\[\d\d:\d\d:\d\d\] planning reasoning-smoke$", r.stderr, re.M), r.stderr


@pytest.mark.parametrize("width", [60, 80, 100, 200])
def test_the_columns_fit_every_width(width: int) -> None:
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=False)
    bars = Progress(*progress_columns(width), console=console, auto_refresh=False)
    desc = "suite 12/12 longctx-variable-tracking-long · candidate gpu-b.internal:8000"
    bars.add_task(desc, total=1260, completed=300)
    console.print(bars.make_tasks_table(bars.tasks))
    (line,) = buf.getvalue().splitlines()
    m = ROW.match(line.rstrip())
    assert m and m["done"] == "300" and m["total"] == "1260", line
    assert len(line) <= width
    assert m["desc"] == desc if width >= 120 else m["desc"].endswith("…")
