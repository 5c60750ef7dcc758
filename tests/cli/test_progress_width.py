"""``compare``'s progress where stderr is not a terminal (a CI job's log): plain timestamped
lines, at least every ``EVALSVC_PROGRESS_EVERY_S`` seconds per suite and side still running, so
a log tells slow from stuck; and rich's bars (on a terminal) laid out at every width, the
counts, the elapsed time and the time left whole, the description cut with "…".

Real ``compare`` processes against the vLLM-shaped stub server (``benchmarks/stub_server.py``,
loopback) and the fault server's ``/slowgen`` endpoint (answers after a delay); the bars'
columns laid out by rich itself.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console
from rich.progress import Progress

from evalsvc.cli._report import progress_columns
from tests.fixtures.db import REPO_ROOT
from tests.fixtures.faults import fault_server

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


def _compare(urls: list[str], tmp_path: Path, *args: str, every: str = "30"
             ) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "80", "EVALSVC_HOME": str(tmp_path / "home"),
           "EVALSVC_PROGRESS_EVERY_S": every, "EVALSVC_ALLOWED_ENDPOINTS": "127.0.0.1"}
    return subprocess.run(
        [sys.executable, "-m", "evalsvc.cli.main", "compare", *urls, "--suite",
         "reasoning-smoke", "--no-calibrate", *args,
         "--database-url", f"sqlite:///{tmp_path / 'e.db'}"],
        capture_output=True, text=True, timeout=300, env=env,
    )


STAMP = r"^\[\d\d:\d\d:\d\d\] "


def test_a_log_gets_plain_lines_with_the_counts(stub_urls: list[str], tmp_path: Path) -> None:
    r = _compare(stub_urls, tmp_path, "--samples", "12")
    assert r.returncode == 3, r.stderr  # the stub's baseline solves nothing: inconclusive
    assert not any(ROW.match(line) for line in r.stderr.splitlines()), r.stderr  # no bar
    # Progress messages carry the time, not the source line that printed them.
    assert re.search(STAMP + r"planning reasoning-smoke$", r.stderr, re.M), r.stderr
    assert re.search(STAMP + r"suite 1/1 reasoning-smoke: 12 items per side$", r.stderr, re.M)
    for side in ("baseline", "candidate"):
        done = re.findall(STAMP + rf"suite 1/1 reasoning-smoke · {side} 127\.0\.0\.1:\d+.*: "
                          r"12/12 done, \d+:\d\d elapsed$", r.stderr, re.M)
        assert len(done) == 1, r.stderr


def test_a_slow_endpoint_gets_a_line_at_least_every_interval(tmp_path: Path) -> None:
    """Answers that take 1.5 s each, one at a time: while the suite runs, a line per side
    at least every 0.5 s with what is done, the time elapsed and the time left."""
    with fault_server(slow_s=1.5) as srv:
        url = f"{srv.origin}/slowgen/v1"
        r = _compare([url, url], tmp_path, "--samples", "4", "--concurrency", "1", every="0.5")
    assert r.returncode in (1, 3), r.stderr
    running = re.findall(STAMP + r"suite 1/1 reasoning-smoke · (baseline|candidate) .*: "
                         r"(\d)/4 done, \d+:\d\d elapsed, (?:about \d+:\d\d left|no answer yet)$",
                         r.stderr, re.M)
    assert {side for side, _ in running} == {"baseline", "candidate"}, r.stderr
    assert any(int(n) > 0 for _, n in running), r.stderr  # an estimate once answers come
    stamps = [time.strptime(m, "%H:%M:%S") for m in re.findall(r"^\[(\d\d:\d\d:\d\d)\]", r.stderr, re.M)]
    seconds = [t.tm_hour * 3600 + t.tm_min * 60 + t.tm_sec for t in stamps]
    gaps = [b - a for a, b in zip(seconds, seconds[1:], strict=False)]
    assert max(gaps) <= 2, r.stderr  # never a silent stretch: 0.5 s asked, a loaded host allowed


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
