"""One resolver for run ids: every command that names a stored run takes its id or a unique
8+ character prefix, as ``runs list`` prints it (``baselines bless`` and ``plan --pilot-run``
took full ids only). A real run against the loopback fault server's well-formed endpoint."""

from __future__ import annotations

import json
from pathlib import Path

from evalsvc.db import Store
from evalsvc.domain import EndpointRef, RunOptions, RunSpec
from evalsvc.services import runs
from tests.fixtures.cli import run_cli
from tests.fixtures.faults import base_url, fault_server

SUITE = "name: tiny-prefix\nkind: reasoning\nseed: 3\nparams:\n  n: 10\n  max_tokens: 8\n"


def test_bless_and_plan_take_a_run_id_prefix(tmp_path: Path) -> None:
    suite = tmp_path / "tiny-prefix.yaml"
    suite.write_text(SUITE)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = Store.from_url(url)
    store.ensure_ready(upgrade_fresh_sqlite=True)
    try:
        with fault_server() as srv:
            endpoint = base_url(srv, "ok")
            report = runs.compare(
                RunSpec(baseline=EndpointRef(url=endpoint), candidates=[EndpointRef(url=endpoint)],
                        suites=[str(suite)], options=RunOptions(concurrency=4)),
                store=store,
            )
    finally:
        store.close()
    run_id = str(report["run_id"])
    env = {"EVALSVC_DATABASE_URL": url}

    plan = run_cli("plan", "-s", str(suite), "--pilot-run", run_id[:8], "--json", env=env)
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)[0]["suite"] == "tiny-prefix"
    short = run_cli("plan", "-s", str(suite), "--pilot-run", run_id[:5], env=env)
    assert short.returncode == 2 and "at least 8 characters" in short.stderr, short.stderr

    bless = run_cli("baselines", "bless", run_id[:8], "--json", env=env)
    assert bless.returncode == 0, bless.stderr
    (made,) = json.loads(bless.stdout)
    assert made["run_id"] == run_id  # stored under the full id, never the prefix
    none = run_cli("baselines", "bless", "ffffffff", env=env)
    assert none.returncode == 2 and "no run 'ffffffff'" in none.stderr, none.stderr
