"""Leases: one keeper renews every lease its holder has; a refused renewal (cancelled or reaped
run) or, with ``give_up_after``, a database silent for that long, loses the run once. Real
store (SQLite and PostgreSQL); beats are driven with ``renew_all`` instead of waiting."""

from __future__ import annotations

import time
from datetime import timedelta

from evalsvc.db import Leases, Store
from evalsvc.domain import RunStatus
from tests.fixtures.db import make_spec

OWNER = "cli:test-host:1"


def _running(store: Store, lease_seconds: float = 60.0) -> str:
    run = store.create_run(
        make_spec(), status=RunStatus.running, lease_owner=OWNER, lease_seconds=lease_seconds
    )
    return run.id


def test_renewal_extends_every_held_lease(store: Store) -> None:
    ids = [_running(store, lease_seconds=60), _running(store, lease_seconds=60)]
    before = {i: store.get_run(i).lease_expires_at for i in ids}  # type: ignore[union-attr]
    leases = Leases(store, owner=OWNER, lease_seconds=3600)
    lost: list[str] = []
    for run_id in ids:
        leases.hold(run_id, on_lost=lambda r=run_id: lost.append(r))
    leases.renew_all()
    for run_id in ids:
        after = store.get_run(run_id).lease_expires_at  # type: ignore[union-attr]
        assert after is not None and after - before[run_id] > timedelta(minutes=30)
    assert lost == []


def test_a_cancelled_run_is_lost_once_and_no_longer_renewed(store: Store) -> None:
    kept, cancelled = _running(store), _running(store)
    leases = Leases(store, owner=OWNER, lease_seconds=60)
    lost: list[str] = []
    leases.hold(kept, on_lost=lambda: lost.append(kept))
    leases.hold(cancelled, on_lost=lambda: lost.append(cancelled))
    assert store.cancel_run(cancelled)
    leases.renew_all()
    leases.renew_all()
    assert lost == [cancelled]
    assert store.get_run(cancelled).status == RunStatus.cancelled  # type: ignore[union-attr]


def test_a_dropped_run_is_never_reported_lost(store: Store) -> None:
    run_id = _running(store)
    leases = Leases(store, owner=OWNER, lease_seconds=60)
    lost: list[str] = []
    leases.hold(run_id, on_lost=lambda: lost.append(run_id))
    leases.drop(run_id)
    store.cancel_run(run_id)
    leases.renew_all()
    assert lost == []


def test_an_unreachable_database_loses_the_run_only_after_give_up_after() -> None:
    """A store whose server refuses connections fails every renewal: without ``give_up_after``
    the run is kept (the in-process compare), with it the run is lost once that long passed."""
    broken = Store.from_url("postgresql+psycopg://postgres@127.0.0.1:9/none")  # port 9: discard
    now = [1000.0]  # a stepped clock: a loaded host's slow refusals must not count as silence

    def clock() -> float:
        return now[0]

    patient = Leases(broken, owner=OWNER, lease_seconds=60, clock=clock)
    strict = Leases(broken, owner=OWNER, lease_seconds=60, give_up_after=30, clock=clock)
    lost: list[str] = []
    patient.hold("a", on_lost=lambda: lost.append("patient"))
    strict.hold("a", on_lost=lambda: lost.append("strict"))
    now[0] += 20
    patient.renew_all()
    strict.renew_all()
    assert lost == []  # 20 s without a beat is within the slack
    now[0] += 20
    patient.renew_all()
    strict.renew_all()
    strict.renew_all()
    assert lost == ["strict"]  # once: a lost run is no longer renewed
    broken.close()


def test_the_heartbeat_thread_renews_and_stops(store: Store) -> None:
    run_id = _running(store, lease_seconds=60)
    initial = store.get_run(run_id).lease_expires_at  # type: ignore[union-attr]
    changed = False
    with Leases(store, owner=OWNER, lease_seconds=0.3) as leases:
        leases.hold(run_id, on_lost=lambda: None)
        deadline = time.monotonic() + 60
        while not changed and time.monotonic() < deadline:
            time.sleep(0.05)
            changed = store.get_run(run_id).lease_expires_at != initial  # type: ignore[union-attr]
    assert changed
    assert leases._thread is not None and not leases._thread.is_alive()  # noqa: SLF001
