"""A queued run says how many workers are alive (``GET /runs/{id}``: ``workers_alive`` and
``queue_note``), through the real API over the real queue: a fresh run is "waiting", one left
queued with no worker names the fix (`evalsvc worker`), one queued behind a worker that holds a
lease counts that worker as alive and busy; a running run carries neither field. The dashboard's
run page and ``compare --server``'s progress line say the same."""

from __future__ import annotations

import time

import httpx
import pytest

from evalsvc.cli._common import err
from evalsvc.cli.rest import follow_remote
from evalsvc.services import dashboard as svc
from evalsvc.services import history

from .conftest import Api
from .test_runs import submit


def test_a_queued_run_says_how_many_workers_are_alive(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    with api.client("submit") as client:
        first = submit(client)
        fresh = client.get(f"/runs/{first}").json()
        # Within the grace an idle worker may be about to claim it: unknown, not "none".
        assert fresh["workers_alive"] is None
        assert fresh["queue_note"] == "queued: waiting for a worker to claim it"

        monkeypatch.setattr(history, "NO_WORKER_AFTER_S", 0.0)
        stale = client.get(f"/runs/{first}").json()
        assert stale["workers_alive"] == 0
        assert "no worker is alive: start one with `evalsvc worker`" in stale["queue_note"]

        # A real claim: worker w-busy holds an unexpired lease on the first run, so it is
        # alive (and busy); the second run waits behind it.
        claimed = api.store.claim_run(worker_id="vm:1:w-busy", lease_seconds=60)
        assert claimed is not None and claimed.id == first
        second = submit(client)
        behind = client.get(f"/runs/{second}").json()
        assert behind["workers_alive"] == 1
        assert behind["queue_note"].startswith("queued: 1 worker is alive and busy")

        running = client.get(f"/runs/{first}").json()
        assert running["status"] == "running"
        assert running["workers_alive"] is None and running["queue_note"] is None


def test_the_dashboard_and_compare_server_show_the_same_line(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(history, "NO_WORKER_AFTER_S", 0.0)
    with api.client("submit") as client:
        run_id = submit(client)
    page = svc.run_page(api.store, run_id)
    assert "no worker is alive: start one with `evalsvc worker`" in page["run"]["queue_note"]
    # `compare --server`'s progress line: one poll of the real API (the deadline has passed).
    headers = {"Authorization": f"Bearer {api.tokens['read']}"}
    with httpx.Client(headers=headers, timeout=30) as http, err.capture() as captured:
        assert follow_remote(http, f"{api.base_url}/api/v1/runs/{run_id}",
                             time.monotonic(), api.base_url) is None
    assert "no worker is alive" in captured.get()
