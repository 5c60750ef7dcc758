"""The CLI around the API: ``evalsvc compare --server`` (the existing REST client, run in this
process) against a real server and a real worker; ``evalsvc tokens`` in this process too (what
it prints and refuses is under test, not an interpreter's start, which costs 2-5 CPU-seconds on
a 2-core host) and ``evalsvc api serve`` as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from evalsvc.db import Store
from evalsvc.scheduler import Executor, Worker
from tests.fixtures.cli import run_cli
from tests.fixtures.db import REPO_ROOT
from tests.fixtures.loopback import free_port, probe

from .conftest import Api
from .executors import make_executor

BASE = "http://127.0.0.1:9001/v1"
CAND = "http://127.0.0.1:9002/v1"


@contextmanager
def background_worker(db_url: str, executor: Executor) -> Iterator[Worker]:
    """A real worker polling the store in a thread until the block ends."""
    with Store.from_url(db_url, endpoint_max_runs=0) as store:
        worker = Worker(store, executor=executor, poll_seconds=0.05, lease_seconds=10)
        thread = threading.Thread(target=worker.run, name="worker", daemon=True)
        thread.start()
        try:
            yield worker
        finally:
            worker.stop()
            thread.join(15)


def test_the_server_url_as_api_serve_prints_it_or_without_its_scheme(api: Api) -> None:
    """``evalsvc api serve`` prints ``http://HOST:PORT/api/v1``: given to ``--server`` it is the
    same server (it read HTTP 404); ``HOST:PORT`` without ``http://`` names the URL it meant."""
    env = {"EVALSVC_TOKEN": api.tokens["submit"]}
    with background_worker(api.db_url, make_executor("pass")):
        printed = run_cli("compare", BASE, CAND, "--suite", "needle-smoke", "--samples", "5",
                          "--server", f"{api.base_url}/api/v1/", "--json", "-", env=env)
    assert printed.returncode == 0, printed.stderr
    assert json.loads(printed.stdout)["verdict"] == "pass"
    bare = api.base_url.removeprefix("http://")
    r = run_cli("compare", BASE, CAND, "--suite", "needle-smoke", "--server", bare, env=env)
    assert r.returncode == 2, r.stderr
    assert f"--server '{bare}' is not a URL: did you mean http://{bare}?" in r.stderr
    assert len(api.store.list_runs()) == 1  # the refused one sent nothing


@pytest.mark.parametrize(("verdict", "code"), [("pass", 0), ("fail", 1)])
def test_compare_server_end_to_end(api: Api, verdict: str, code: int) -> None:
    with background_worker(api.db_url, make_executor(verdict)):
        result = run_cli(
            "compare",
            BASE,
            CAND,
            "--suite",
            "needle-smoke",
            "--samples",
            "5",
            "--server",
            api.base_url,
            "--json",
            "-",
            env={"EVALSVC_TOKEN": api.tokens["submit"]},
        )
    assert result.returncode == code, result.stderr
    report = json.loads(result.stdout)
    assert report["verdict"] == verdict
    assert report["baseline"]["url"] == BASE
    assert report["candidates"][0]["suites"][0]["suite"] == "needle-smoke"
    (run,) = api.store.list_runs()
    assert report["run_id"] == run.id and run.spec.options.samples == 5
    assert f"submitted run {run.id}" in result.stderr
    with api.client("read") as reader:
        assert reader.get(f"/runs/{run.id}/gate").json()["exit_code"] == code


def test_compare_server_refusals(api: Api) -> None:
    token = {"EVALSVC_TOKEN": api.tokens["submit"]}
    unknown = run_cli(
        "compare", BASE, CAND, "--suite", "no-such-suite", "--server", api.base_url, env=token
    )
    assert unknown.returncode == 2
    assert "HTTP 422" in unknown.stderr and "no-such-suite" in unknown.stderr
    ghost = run_cli("compare", "ghost", CAND, "--server", api.base_url, env=token)
    assert ghost.returncode == 2 and "ghost" in ghost.stderr
    no_token = run_cli(
        "compare",
        BASE,
        CAND,
        "--suite",
        "needle-smoke",
        "--server",
        api.base_url,
        env={"EVALSVC_TOKEN": ""},
    )
    assert no_token.returncode == 2 and "HTTP 401" in no_token.stderr  # configuration
    assert "set EVALSVC_TOKEN to a token with the submit scope" in no_token.stderr
    read_only = run_cli(
        "compare", BASE, CAND, "--suite", "needle-smoke", "--server", api.base_url,
        env={"EVALSVC_TOKEN": api.tokens["read"]},
    )
    assert read_only.returncode == 2 and "HTTP 403" in read_only.stderr
    assert "lacks the submit scope" in read_only.stderr
    revoked = run_cli(
        "compare", BASE, CAND, "--suite", "needle-smoke", "--server", api.base_url,
        env={"EVALSVC_TOKEN": "evs_not-a-token"},
    )
    assert revoked.returncode == 2 and "unknown or revoked" in revoked.stderr
    assert api.store.list_runs() == []


def test_tokens_cli_and_api_serve(tmp_path: Path, sqlite_template: Path) -> None:
    db = tmp_path / "evalsvc.db"
    db.write_bytes(sqlite_template.read_bytes())
    url = f"sqlite:///{db}"
    created = run_cli("tokens", "create", "ci", "--scope", "read", "--database-url", url)
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip()
    assert token.startswith("evs_") and "shown only now" in created.stderr
    bad = run_cli("tokens", "create", "x", "--scope", "root", "--database-url", url)
    assert bad.returncode == 2 and "unknown scope" in bad.stderr
    dup = run_cli("tokens", "create", "ci", "--scope", "admin", "--database-url", url)
    assert dup.returncode == 2 and "already exists" in dup.stderr

    port = free_port()
    env = {**os.environ, "EVALSVC_API_AUTH": "on"}
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "evalsvc.cli.main",
            "api",
            "serve",
            "--port",
            str(port),
            "--database-url",
            url,
            "--log-level",
            "warning",
        ],
        env=env,
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}/api/v1"
        deadline = time.monotonic() + 300  # a loaded 2-core host starts it in tens of seconds
        while True:
            try:
                if probe().get(f"{base}/healthz", timeout=10).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert server.poll() is None and time.monotonic() < deadline, "server did not start"
            time.sleep(0.1)
        headers = {"Authorization": f"Bearer {token}"}
        assert httpx.get(f"{base}/runs", headers=headers, timeout=60).status_code == 200
        assert httpx.post(f"{base}/endpoints", headers=headers, json={}, timeout=60).status_code == 403
        revoked = run_cli("tokens", "revoke", "ci", "--database-url", url)
        assert revoked.returncode == 0, revoked.stderr
        assert httpx.get(f"{base}/runs", headers=headers, timeout=60).status_code == 401
    finally:
        server.terminate()
        output = server.communicate(timeout=60)[0]
    assert "evalsvc API on" in output
    listed = run_cli("tokens", "list", "--json", "--database-url", url)
    (info,) = json.loads(listed.stdout)
    assert info["name"] == "ci" and info["scopes"] == ["read"] and info["revoked_at"]
    assert token not in listed.stdout
    again = run_cli("tokens", "revoke", "ci", "--database-url", url)
    assert again.returncode == 2 and "no active token" in again.stderr  # unknown name: 2
