"""A worker that loses its database mid-run (real PostgreSQL behind a loopback TCP proxy that
cuts every connection): it stops the run once a whole lease passed without a heartbeat, keeps
its hands off the run, and the run is re-queued by the reaper once the database is back."""

from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy as sa

from evalsvc.db import Store
from evalsvc.domain import RunInfo, RunStatus
from evalsvc.scheduler import Worker
from tests.fixtures.db import make_spec
from tests.fixtures.tcp_proxy import TcpProxy

pytestmark = pytest.mark.postgres


def test_worker_gives_up_a_run_after_a_lease_without_database(pg_url: str) -> None:
    upstream = sa.make_url(pg_url)
    proxy = TcpProxy((upstream.host or "127.0.0.1", upstream.port or 5432))
    proxy.restore()
    proxied = upstream.set(host="127.0.0.1", port=proxy.port)
    started, stopped = threading.Event(), threading.Event()

    def wait_for_cancel(
        store: Store, run: RunInfo, cancel: threading.Event, worker_id: str
    ) -> None:
        started.set()
        if cancel.wait(120):
            stopped.set()

    with (
        Store.from_url(pg_url) as direct,
        Store.from_url(proxied.render_as_string(hide_password=False)) as store,
    ):
        run = direct.create_run(make_spec("http://outage-a/v1", ("http://outage-b/v1",)))
        # A 5 s lease (a beat every 1.7 s): a loaded host's late beat before the cut must not
        # let the worker's own reaper take the run; the outage itself outlasts any lease.
        worker = Worker(
            store,
            executor=wait_for_cancel,
            lease_seconds=5,
            poll_seconds=0.1,
            settle_retry_seconds=1.0,
        )
        thread = threading.Thread(target=worker.run, kwargs={"max_runs": 1})
        thread.start()
        assert started.wait(60)
        proxy.cut()
        assert stopped.wait(120), "the executor was never told to stop"
        thread.join(120)
        assert not thread.is_alive()
        proxy.restore()
        # the worker left the run alone (still running under its lease, not failed, not
        # released); the reaper returns it to the queue once the lease has expired
        left = direct.get_run(run.id)
        assert left is not None and left.status == RunStatus.running
        assert left.lease_owner == worker.worker_id
        deadline = time.monotonic() + 120
        while direct.reap_expired(max_attempts=3) != [run.id]:
            assert time.monotonic() < deadline, "never reaped"
            time.sleep(0.1)
        requeued = direct.get_run(run.id)
        assert requeued is not None and requeued.status == RunStatus.queued
    proxy.cut()
