"""``benchmarks/bootstrap_scale.py`` keeps working: one tiny round, in-process (it is CPU only)."""

from __future__ import annotations

import runpy
import sys

import pytest

from tests.fixtures.cli import REPO_ROOT


def test_bootstrap_scale_prints_a_row_per_size(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    script = REPO_ROOT / "benchmarks" / "bootstrap_scale.py"
    argv = [str(script), "--sizes", "50", "400", "--ratio-sizes", "300", "--repeats", "1"]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as done:
        runpy.run_path(str(script), run_name="__main__")
    assert done.value.code == 0
    # Two tables (mean, then recovery), each a header, a |---| line and one row per size.
    tables = [
        [line for line in block.splitlines() if line.startswith("| ")][1:]
        for block in capsys.readouterr().out.strip().split("\n\n")
    ]
    assert [[row.split(" | ")[0] for row in rows] for rows in tables] == [
        ["| 50", "| 400"],
        ["| 300"],
    ]
    # Both variants ran: a positive median CPU time in each column.
    for row in tables[0]:
        index_s, counts_s = (float(cell) for cell in row.split(" | ")[1:3])
        assert index_s > 0 and counts_s > 0
    unbatched, batched = (cell.split(", ") for cell in tables[1][0].rstrip(" |").split(" | ")[1:])
    assert float(unbatched[0]) > 0 and float(batched[0]) > 0
