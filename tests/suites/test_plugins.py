"""Suite-kind plugins: the built-in kinds come through the ``evalsvc.suites`` entry points like
any outside package's, and a broken plugin is reported by name without breaking the catalog."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalsvc.suites import _registry, broken_kinds, catalog, suite_kinds

BUILTIN = {"dataset", "determinism", "drift", "lmeval", "needle", "reasoning", "speed"}


def test_builtin_kinds_are_entry_points() -> None:
    from importlib.metadata import entry_points

    names = {ep.name for ep in entry_points(group="evalsvc.suites")}
    assert names >= BUILTIN
    assert set(suite_kinds()) >= BUILTIN


def test_a_broken_plugin_never_breaks_the_catalog(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dist = tmp_path / "broken_evalsvc_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: broken-evalsvc-plugin\nVersion: 0.1\n"
    )
    (dist / "entry_points.txt").write_text(
        "[evalsvc.suites]\n"
        "missing = no_such_module_for_evalsvc_tests:Kind\n"
        "not-a-suite = json:dumps\n"
        "clash = evalsvc.suites.kinds.speed:SpeedSuite\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(_registry, "_ENTRY_POINTS_LOADED", False)
    monkeypatch.setattr(_registry, "_KINDS", {})
    monkeypatch.setattr(_registry, "_BROKEN", {})
    kinds = suite_kinds()
    assert set(kinds) >= BUILTIN  # every built-in still loads
    broken = broken_kinds()
    assert "ModuleNotFoundError" in broken["missing"]
    assert "not a Suite subclass" in broken["not-a-suite"]
    assert "clash" not in broken  # the same class under another name is harmless
    names = {s.name for s in catalog()}
    assert {"needle-smoke", "reasoning-smoke", "smoke"} <= names
