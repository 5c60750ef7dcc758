"""Packaging: the catalog and the migrations are package data; every EVALSVC_ variable is a setting."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import pytest

import evalsvc
from evalsvc.db._migrate import MIGRATIONS_DIR
from evalsvc.local import home_dir
from evalsvc.settings import Settings
from evalsvc.suites import Suite, catalog, catalog_dir, load_suite

PACKAGE = Path(evalsvc.__file__).parent


def test_catalog_and_migrations_are_inside_the_package() -> None:
    assert catalog_dir() == resources.files("evalsvc.suites") / "catalog"
    assert catalog_dir().is_relative_to(PACKAGE)
    assert MIGRATIONS_DIR.is_relative_to(PACKAGE)
    assert (MIGRATIONS_DIR / "env.py").is_file() and (MIGRATIONS_DIR / "script.py.mako").is_file()
    assert list((MIGRATIONS_DIR / "versions").glob("*.py"))
    assert (catalog_dir() / "data" / "haystack.txt").is_file()
    assert len(list((catalog_dir() / "sets").glob("*.yaml"))) >= 3


def test_suites_dir_adds_and_replaces(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    packaged = {e.name for e in catalog()}
    smoke = (catalog_dir() / "reasoning-smoke.yaml").read_text()
    (tmp_path / "mine.yaml").write_text(smoke.replace("name: reasoning-smoke", "name: mine"))
    (tmp_path / "reasoning-smoke.yaml").write_text(
        smoke.replace("description: ", "description: REPLACED ")
    )
    monkeypatch.setenv("EVALSVC_SUITES_DIR", str(tmp_path))
    entries = {e.name: e for e in catalog()}
    assert set(entries) == packaged | {"mine"}  # added
    replaced = entries["reasoning-smoke"]
    assert isinstance(replaced, Suite) and replaced.spec.description.startswith("REPLACED")
    # without a data/ directory of its own the kinds keep reading the packaged data
    assert catalog_dir() == resources.files("evalsvc.suites") / "catalog"
    assert load_suite("needle-smoke").item_count() == 40
    (tmp_path / "data").mkdir()
    assert catalog_dir() == tmp_path
    monkeypatch.setenv("EVALSVC_SUITES_DIR", "")  # empty counts as unset
    assert {e.name for e in catalog()} == packaged
    assert catalog_dir() == resources.files("evalsvc.suites") / "catalog"


def test_one_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("EVALSVC_HOME", raising=False)
    monkeypatch.delenv("EVALSVC_DATABASE_URL", raising=False)
    default = Settings()
    assert home_dir() == default.home.resolve()
    assert default.database_url == f"sqlite:///{default.home / 'evalsvc.db'}"
    monkeypatch.setenv("EVALSVC_HOME", str(tmp_path))
    assert home_dir() == tmp_path.resolve() == Settings().home.resolve()


# os.environ.get("EVALSVC_X"), os.environ["EVALSVC_X"], os.getenv("EVALSVC_X"), or the same
# through a module constant holding the name.
_READ = re.compile(r"(os\.environ(\.get)?\s*[\[(]|os\.getenv\s*\()\s*(\"EVALSVC_|ENV_|[A-Z_]*_ENV\b)")
_LAUNCHER = PACKAGE / "local" / "_launcher.py"
_CONST = re.compile(r"^[A-Z_]*ENV[A-Z_]*\s*=\s*\"(EVALSVC_[A-Z0-9_]+)\"", re.M)


def test_every_variable_is_read_through_settings() -> None:
    offenders = [
        f"{path.relative_to(PACKAGE)}:{n}: {line.strip()}"
        for path in PACKAGE.rglob("*.py")
        if path.name != "settings.py" and path != _LAUNCHER
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if _READ.search(line)
    ]
    assert offenders == []
    # The vLLM launcher runs in the managed venv, without evalsvc: it reads the one variable that
    # `evalsvc local` passes it from Settings, and that variable is a Settings field.
    read = re.findall(r"os\.environ\.get\(\"(EVALSVC_\w+)\"", _LAUNCHER.read_text())
    assert read == ["EVALSVC_LOCAL_SHM_NAP_US"]
    assert "local_shm_nap_us" in Settings.model_fields
    # Every module constant that names a variable (``ENV_X = "EVALSVC_..."``, ``X_ENV = ...``)
    # names a Settings field (prefixes such as "EVALSVC_ENDPOINT_KEY_" are not variables).
    fields = {f"EVALSVC_{name.upper()}" for name in Settings.model_fields}
    named = {
        m
        for path in PACKAGE.rglob("*.py")
        for m in _CONST.findall(path.read_text())
        if not m.endswith("_")
    }
    assert named, "the scan found no variable names at all"
    assert named <= fields, named - fields
