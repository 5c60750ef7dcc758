"""A preparation step under another live display (``compare``'s progress bars, which redirect
stderr through rich's ``FileProxy``) prints lines with the usual time and the time left instead
of drawing a second spinner (``evalsvc.local._ui.run_logged``): the lm-eval venv is prepared
that way when a suite first needs it."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest
from rich.console import Console
from rich.progress import Progress

from evalsvc.local import _ui


def test_under_progress_bars_a_step_prints_lines_with_the_time_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_ui, "LINE_EVERY_S", 0.5)
    screen = io.StringIO()
    bars = Console(file=screen, force_terminal=True, width=200)
    with Progress(console=bars, transient=False) as progress:
        progress.add_task("compare", total=10)
        from rich.file_proxy import FileProxy

        assert isinstance(sys.stderr, FileProxy)  # what the bars do to stderr
        _ui.run_logged(
            "installing lm-eval",
            [sys.executable, "-c", "import time; time.sleep(2.5)"],
            tmp_path / "step.log",
            expected_s=60.0,
        )
    text = screen.getvalue()
    assert f"installing lm-eval (log: {tmp_path / 'step.log'}, usually 1:00)" in text
    assert "about 0:5" in text and "left; log: " in text  # a later line: elapsed, time left
