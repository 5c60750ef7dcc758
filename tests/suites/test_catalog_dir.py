"""``EVALSVC_SUITES_DIR``: one broken file is skipped with a warning naming it, the rest of the
catalog (packaged and added suites) still lists, and asking for the broken suite by name still
says what is wrong with it; a suite file where a catalog name is needed names the directory."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from evalsvc.suites import SuiteError, catalog, load_suite


def test_a_broken_file_is_skipped_with_a_warning_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "broken.yaml").write_text("name: broken\nkind: [\n")
    (tmp_path / "mine.yaml").write_text("name: mine\nkind: reasoning\nparams: {n: 4}\n")
    monkeypatch.setenv("EVALSVC_SUITES_DIR", str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="evalsvc.suites"):
        names = {entry.name for entry in catalog()}
    assert "mine" in names and "reasoning-smoke" in names and "broken" not in names
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert warnings[0].startswith(f"suite catalog: skipped {tmp_path / 'broken.yaml'}:3: ")
    assert "invalid YAML" in warnings[0] and "fix or remove the file" in warnings[0]
    with pytest.raises(SuiteError, match="broken.yaml:3: invalid YAML"):
        load_suite("broken")


def test_a_suite_file_where_a_name_is_needed_points_at_the_suites_dir() -> None:
    with pytest.raises(SuiteError, match="EVALSVC_SUITES_DIR") as err:
        load_suite("./mine.yaml")
    assert "give its name" in str(err.value)
