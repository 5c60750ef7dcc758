"""Fixtures of the REST API tests: a real uvicorn server on a free loopback port per test module
and backend (SQLite and PostgreSQL), tokens for each scope, and a real ``Worker`` whose executor
completes runs with a stored report (no model endpoints: the API only queues and reads runs).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from evalsvc.db import Store
from evalsvc.db.testing import clear_all_tables
from evalsvc.scheduler import Executor, Worker
from evalsvc.webapp import create_app
from tests.fixtures.db import (  # noqa: F401  (pytest fixtures)
    BACKENDS,
    pg_session_url,
    sqlite_template,
)
from tests.fixtures.loopback import uvicorn_app

from .executors import complete_with_report

SCOPES = ("read", "submit", "admin")


@pytest.fixture(scope="module", params=BACKENDS)
def api_db_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A database at head for this module's server, on each backend."""
    if request.param == "sqlite":
        path = tmp_path_factory.mktemp("api") / "evalsvc.db"
        shutil.copy(request.getfixturevalue("sqlite_template"), path)
        return f"sqlite:///{path}"
    url: str = request.getfixturevalue("pg_session_url")
    return url


@pytest.fixture(scope="module")
def server_url(api_db_url: str) -> Iterator[str]:
    """Base URL of a real API server (auth on) over ``api_db_url``."""
    with uvicorn_app(create_app(api_db_url, auth=True)) as url:
        yield url


@dataclass
class Api:
    """One test's view of the module's server: its URL, its store, and a token per scope."""

    base_url: str
    db_url: str
    store: Store
    tokens: dict[str, str]

    def client(self, scope: str | None = "admin", token: str | None = None) -> httpx.Client:
        """An httpx client on ``/api/v1`` with the token of ``scope`` (None: no token)."""
        headers = {}
        bearer = token or (self.tokens[scope] if scope else None)
        if bearer:
            headers["Authorization"] = f"Bearer {bearer}"
        return httpx.Client(base_url=f"{self.base_url}/api/v1", headers=headers, timeout=30)

    def run_worker_once(self, executor: Executor = complete_with_report) -> int:
        """A real worker claims and executes every queued run, then returns."""
        worker = Worker(self.store, executor=executor, poll_seconds=0.05, lease_seconds=10)
        return worker.run(once=True)


@pytest.fixture
def api(server_url: str, api_db_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Api]:
    """Empty tables, and fresh ``read``, ``submit`` and ``admin`` tokens. The tests' endpoints
    are on loopback, so loopback is allowed the way an operator would (docs/security.md)."""
    monkeypatch.setenv("EVALSVC_ALLOWED_ENDPOINTS", "127.0.0.0/8")
    with Store.from_url(api_db_url, endpoint_max_runs=0) as store:
        clear_all_tables(store)
        tokens = {s: store.create_api_token(name=f"t-{s}", scopes=[s])[0] for s in SCOPES}
        yield Api(base_url=server_url, db_url=api_db_url, store=store, tokens=tokens)
