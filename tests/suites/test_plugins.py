"""Suite-kind plugins: the built-in kinds come through the ``evalsvc.suites`` entry points like
any outside package's, and a broken plugin is reported by name without breaking the catalog."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalsvc.suites import _registry, broken_kinds, catalog, suite_kinds

BUILTIN = {"dataset", "determinism", "drift", "lmeval", "needle", "reasoning", "speed", "structured",
           "toolcalls"}


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


class _SlowEntryPoint:
    """An entry point whose load takes a while, as a cold import does in a fresh process."""

    def __init__(self, ep: object) -> None:
        self._ep = ep
        self.name: str = ep.name  # type: ignore[attr-defined]
        self.value: str = ep.value  # type: ignore[attr-defined]

    def load(self) -> object:
        import time

        time.sleep(0.02)
        return self._ep.load()  # type: ignore[attr-defined]


def test_concurrent_first_lookups_all_see_every_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 17 break 3: the registry marked itself loaded before loading, so a lookup racing the
    first one saw no kinds ("unknown suite kind 'reasoning'")."""
    import threading
    from importlib.metadata import entry_points

    real = list(entry_points(group="evalsvc.suites"))
    monkeypatch.setattr(
        _registry, "entry_points", lambda group: [_SlowEntryPoint(ep) for ep in real]
    )
    monkeypatch.setattr(_registry, "_ENTRY_POINTS_LOADED", False)
    monkeypatch.setattr(_registry, "_KINDS", {})
    monkeypatch.setattr(_registry, "_BROKEN", {})
    threads = 16
    barrier = threading.Barrier(threads)
    seen: list[set[str]] = []

    def lookup() -> None:
        barrier.wait()
        seen.append(set(suite_kinds()))

    workers = [threading.Thread(target=lookup) for _ in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(30)
    assert len(seen) == threads
    assert all(kinds >= BUILTIN for kinds in seen), [sorted(BUILTIN - k) for k in seen]
