"""Issue 17 break 10: with a read-only or full database ``/healthz`` stayed 200 and
``evalsvc_database_up`` 1 while every authenticated read answered 503 (token verification
wrote ``last_used_at``). Now token verification is a read (the last use is recorded
best-effort), and readiness includes the write path: reads keep working, ``/healthz`` says 503
with the reason and ``evalsvc_database_up`` is 0.

A real ``evalsvc api serve`` process on a PostgreSQL database set read-only
(``default_transaction_read_only``, as on a hot standby). A read-only SQLite file is not the
same case: SQLite in WAL mode cannot open it for reads either, so ``/healthz`` already says
503 (tests/cli/test_exit_codes.py covers its errors)."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from evalsvc.db import Store
from evalsvc.db.testing import temporary_postgres_database
from tests.fixtures.apiserve import ApiProcess, api_serve
from tests.fixtures.db import pg_admin_url_or_skip
from tests.fixtures.loopback import probe


def _prepare(url: str) -> str:
    with Store.from_url(url) as store:
        store.upgrade()
        token, _ = store.create_api_token(name="reader", scopes=["read"])
    return token


def _wait_answering(api: ApiProcess) -> httpx.Response:
    deadline = time.monotonic() + 300  # not waited for by api_serve: the start is here
    while True:
        try:
            return probe().get(f"{api.url}/api/v1/healthz", timeout=10)
        except httpx.TransportError:
            assert api.proc.poll() is None and time.monotonic() < deadline, api.log.read_text()
            time.sleep(0.1)


def _assert_reads_served_but_not_ready(api: ApiProcess, token: str) -> None:
    health = _wait_answering(api)
    assert health.status_code == 503, health.text
    assert "refuses writes" in health.json()["detail"]
    runs = httpx.get(
        f"{api.url}/api/v1/runs", headers={"Authorization": f"Bearer {token}"}, timeout=30
    )
    assert runs.status_code == 200, runs.text
    metrics = httpx.get(f"{api.url}/api/v1/metrics", timeout=30).text
    assert "evalsvc_database_up 0.0" in metrics


@pytest.mark.postgres
def test_read_only_postgresql(tmp_path: Path) -> None:
    admin = pg_admin_url_or_skip()
    with temporary_postgres_database(admin) as url:
        token = _prepare(url)
        with api_serve(url, log=tmp_path / "ok.log") as api:  # writable: ready
            assert "evalsvc_database_up 1.0" in httpx.get(f"{api.url}/api/v1/metrics", timeout=30).text
        engine = sa.create_engine(admin, isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            name = sa.make_url(url).database
            conn.execute(sa.text(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on'))
        engine.dispose()
        with api_serve(url, log=tmp_path / "ro.log", wait_healthy=False) as api:
            _assert_reads_served_but_not_ready(api, token)
