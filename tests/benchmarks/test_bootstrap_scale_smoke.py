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
    monkeypatch.setattr(sys, "argv", [str(script), "--sizes", "50", "400", "--repeats", "1"])
    with pytest.raises(SystemExit) as done:
        runpy.run_path(str(script), run_name="__main__")
    assert done.value.code == 0
    # The header, then one row per size (the |---| line does not start with "| ").
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert [row.split(" | ")[0] for row in rows[1:]] == ["| 50", "| 400"]
    # Both variants ran: a positive median CPU time in each column.
    for row in rows[1:]:
        index_s, counts_s = (float(cell) for cell in row.split(" | ")[1:3])
        assert index_s > 0 and counts_s > 0
