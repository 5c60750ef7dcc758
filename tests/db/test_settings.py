"""Settings: the embedded database lives under EVALSVC_HOME unless a URL is given."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalsvc.db import Store
from evalsvc.settings import Settings


def test_default_database_is_under_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("EVALSVC_DATABASE_URL", raising=False)
    monkeypatch.setenv("EVALSVC_HOME", str(tmp_path / "home"))
    settings = Settings()
    assert settings.database_url == f"sqlite:///{tmp_path / 'home' / 'evalsvc.db'}"
    # the directory is created on first connect, not when settings or the store are built
    store = Store.from_url()
    assert not (tmp_path / "home").exists()
    store.ensure_ready()  # a fresh embedded database is created at head
    assert (tmp_path / "home" / "evalsvc.db").is_file()
    store.close()


def test_environment_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALSVC_DATABASE_URL", "postgresql+psycopg://u@db:5432/evalsvc")
    monkeypatch.setenv("EVALSVC_ENDPOINT_MAX_RUNS", "3")
    settings = Settings()
    assert settings.database_url == "postgresql+psycopg://u@db:5432/evalsvc"
    assert settings.endpoint_max_runs == 3
    assert Store.from_url().endpoint_max_runs == 3
