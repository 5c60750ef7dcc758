"""A queued run says how many workers are alive (``GET /runs/{id}``: ``workers_alive`` and
``queue_note``), through the real API over the real queue: a fresh run is "waiting", one left
queued with no worker names the fix (`evalsvc worker`), one queued behind a worker that holds a
lease counts that worker as alive and busy; a running run carries neither field."""

from __future__ import annotations

import pytest

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
