"""The built wheel, installed into a fresh venv outside the checkout, is a working evalsvc:
the whole catalog, migrations on SQLite and PostgreSQL, and a real ``compare`` (issue 10)."""

from __future__ import annotations

import json
import os
import subprocess
import time
import zipfile
from pathlib import Path
from typing import Any

import httpx
import pytest

from evalsvc.db import Store
from evalsvc.db._migrate import head_revision
from evalsvc.db.testing import temporary_postgres_database
from evalsvc.suites import catalog, catalog_dir
from tests.fixtures.loopback import free_port, probe
from tests.fixtures.spare import spare_endpoint

from .conftest import REPO_ROOT, InstalledWheel, write_tiny_suite

pytestmark = pytest.mark.slow


def test_wheel_carries_the_catalog_and_the_migrations(installed_wheel: InstalledWheel) -> None:
    names = set(zipfile.ZipFile(installed_wheel.wheel).namelist())
    for path in catalog_dir().rglob("*"):
        if path.is_file() and path.suffix in (".yaml", ".txt", ".jsonl"):
            assert f"evalsvc/suites/catalog/{path.relative_to(catalog_dir())}" in names
    static = REPO_ROOT / "evalsvc" / "api" / "static"
    for path in static.rglob("*"):
        if path.is_file():
            assert f"evalsvc/api/static/{path.relative_to(static)}" in names
    migrations = REPO_ROOT / "evalsvc" / "db" / "migrations"
    for path in migrations.rglob("*"):
        if path.is_file() and path.suffix in (".py", ".mako"):
            assert f"evalsvc/db/migrations/{path.relative_to(migrations)}" in names


def test_evalsvc_imports_from_the_wheel(installed_wheel: InstalledWheel) -> None:
    r = installed_wheel.run("--help")
    assert r.returncode == 0, r.stderr
    where = subprocess.run(
        [str(installed_wheel.python), "-c", "import evalsvc; print(evalsvc.__file__)"],
        cwd=installed_wheel.workdir, env=installed_wheel.env(), capture_output=True, text=True,
        check=True,
    ).stdout.strip()
    assert Path(where).is_relative_to(installed_wheel.venv), where
    assert not Path(where).is_relative_to(REPO_ROOT)


def test_suites_list_shows_the_whole_catalog(installed_wheel: InstalledWheel) -> None:
    r = installed_wheel.run("suites", "list", "--json")
    assert r.returncode == 0, r.stderr
    expected = {entry.name for entry in catalog()}  # the checkout's catalog
    assert len(expected) >= 20
    rows = json.loads(r.stdout)
    assert {row["name"] for row in rows} == expected
    assert {row["kind"] for row in rows} >= {"needle", "reasoning", "determinism", "drift", "speed", "set"}
    table = installed_wheel.run("suites", "list", COLUMNS="300")
    assert table.returncode == 0 and "needle-smoke" in table.stdout and "release" in table.stdout


def test_db_upgrade_on_sqlite(installed_wheel: InstalledWheel, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'wheel.db'}"
    r = installed_wheel.run("db", "upgrade", EVALSVC_DATABASE_URL=url)
    assert r.returncode == 0, r.stderr
    with Store.from_url(url) as store:
        store.check_at_head()
    r = installed_wheel.run("db", "current", EVALSVC_DATABASE_URL=url)
    assert r.returncode == 0 and head_revision() in r.stdout, r.stdout + r.stderr


def test_default_database_is_under_evalsvc_home(installed_wheel: InstalledWheel) -> None:
    env = installed_wheel.env()
    env.pop("EVALSVC_DATABASE_URL", None)
    home = Path(env["EVALSVC_HOME"])
    r = subprocess.run([str(installed_wheel.evalsvc), "db", "upgrade"], cwd=installed_wheel.workdir,
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert (home / "evalsvc.db").is_file()


@pytest.mark.postgres
def test_db_upgrade_on_postgresql(installed_wheel: InstalledWheel) -> None:
    admin = os.environ.get("EVALSVC_TEST_DATABASE_URL")
    if not admin:
        pytest.skip("needs EVALSVC_TEST_DATABASE_URL (e.g. postgresql+psycopg://postgres@127.0.0.1:5432/test)")
    with temporary_postgres_database(admin, prefix="evalsvc_wheel") as url:
        r = installed_wheel.run("db", "upgrade", EVALSVC_DATABASE_URL=url)
        assert r.returncode == 0, r.stderr
        with Store.from_url(url) as store:
            store.check_at_head()
        r = installed_wheel.run("db", "current", EVALSVC_DATABASE_URL=url)
        assert r.returncode == 0 and head_revision() in r.stdout, r.stdout + r.stderr


def test_api_serves_offline_docs_from_the_wheel(installed_wheel: InstalledWheel, tmp_path: Path) -> None:
    port = free_port()
    env = installed_wheel.env(EVALSVC_DATABASE_URL=f"sqlite:///{tmp_path / 'api.db'}")
    log = (tmp_path / "api.log").open("wb")
    proc = subprocess.Popen(
        [str(installed_wheel.evalsvc), "api", "serve", "--port", str(port), "--log-level", "warning"],
        cwd=installed_wheel.workdir, env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 300  # a loaded 2-core host starts it in tens of seconds
        while True:
            try:
                if probe().get(f"{base}/healthz", timeout=10).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "api.log").read_text()
            time.sleep(0.3)
        docs = httpx.get(f"{base}/docs", timeout=60)
        assert docs.status_code == 200 and "/static/api-docs/swagger-ui/swagger-ui-bundle.js" in docs.text
        js = httpx.get(f"{base}/static/api-docs/swagger-ui/swagger-ui-bundle.js", timeout=60)
        assert js.status_code == 200 and len(js.content) > 100_000
        redoc = httpx.get(f"{base}/static/api-docs/redoc/redoc.standalone.js", timeout=60)
        assert redoc.status_code == 200
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()


@pytest.mark.endpoints
def test_compare_against_the_local_endpoint(
    installed_wheel: InstalledWheel, local_endpoints: Any, tmp_path: Path
) -> None:
    suite = write_tiny_suite(tmp_path)
    url = spare_endpoint(local_endpoints)
    r = installed_wheel.run(
        "compare", url, url, "--suite", str(suite), "--json", str(tmp_path / "report.json"),
        EVALSVC_DATABASE_URL=f"sqlite:///{tmp_path / 'compare.db'}", timeout=900,
    )
    # One endpoint against itself on 4 items: pass or (too few items to rule out the margin) inconclusive,
    # never fail or an error.
    assert r.returncode in (0, 3), r.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["verdict"] == {0: "pass", 3: "inconclusive"}[r.returncode]
    (cand,) = report["candidates"]
    (s,) = cand["suites"]
    assert s["suite"] == "deploy-tiny" and s["n"] == 4, s
    assert s["n_errors"] == 0 and s["n_planned"] == 4, s
