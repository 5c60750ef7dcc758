"""One bad schedule never stops the others (issue 9, "Isolation").

A schedule whose stored template can no longer be queued (``priority: 2^63`` made
``worker --schedules`` exit 1 at every fire time on PostgreSQL, stopping every schedule) is
skipped in its own transaction with ``last_error`` set and shown by ``schedules list``; the
other schedules fire, the worker keeps running and exits 0, and the bad schedule fires again
once it is fixed. On both backends.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from evalsvc.db import Store
from evalsvc.db._orm import ScheduleRow
from evalsvc.scheduler import Scheduler
from tests.fixtures.db import make_spec, run_cli, subprocess_env, utc

HOURLY = "0 * * * *"


def _set_template(store: Store, name: str, **changes: Any) -> None:
    """Write a template the API would refuse straight into the row (as an older evalsvc, a
    hand edit or a restored backup could have left it)."""
    with store._db.session() as session:  # noqa: SLF001 - the test plays a corrupted database
        row = session.scalar(sa.select(ScheduleRow).where(ScheduleRow.name == name))
        assert row is not None
        row.template = {**row.template, **changes}


def _three_schedules(store: Store, start: datetime) -> None:
    for name in ("good-a", "bad", "good-b"):
        store.add_schedule(name=name, cron=HOURLY, template=make_spec(), start_at=start)
    _set_template(store, "bad", priority=2**63)


def test_a_bad_schedule_is_skipped_with_its_error_and_the_others_fire(store: Store) -> None:
    _three_schedules(store, start=utc(2025, 1, 1, 0, 30))
    now = utc(2025, 1, 1, 3, 10)
    runs = store.fire_due_schedules(now=now)
    by_name = {s["name"]: s for s in store.list_schedules()}
    fired = {r.schedule_id for r in runs}
    assert fired == {by_name["good-a"]["id"], by_name["good-b"]["id"]}
    bad = by_name["bad"]
    assert bad["last_error"] and "priority" in bad["last_error"]
    assert bad["last_error_at"] == now and bad["enabled"]
    # Skipped until its next fire time, not retried (and logged) at every tick.
    assert bad["next_fire_time"] == utc(2025, 1, 1, 4, 0)
    assert by_name["good-a"]["last_error"] is None
    assert store.fire_due_schedules(now=now + timedelta(minutes=5)) == []

    # Fixed: it fires at its next fire time and the error is cleared.
    _set_template(store, "bad", priority=5)
    later = store.fire_due_schedules(now=utc(2025, 1, 1, 4, 1))
    assert bad["id"] in {r.schedule_id for r in later}
    fixed = store.get_schedule("bad")
    assert fixed is not None and fixed["last_error"] is None


def test_a_template_that_no_longer_validates_is_isolated(store: Store) -> None:
    start = utc(2025, 1, 1, 0, 30)
    store.add_schedule(name="ok", cron=HOURLY, template=make_spec(), start_at=start)
    store.add_schedule(name="broken", cron=HOURLY, template=make_spec(), start_at=start)
    _set_template(store, "broken", options={"samples": 999_999_999_999}, labels={"k\x00": "v"})
    runs = store.fire_due_schedules(now=utc(2025, 1, 1, 2, 0))
    assert len(runs) == 1
    broken = store.get_schedule("broken")
    assert broken is not None and "samples" in (broken["last_error"] or "")


def test_worker_with_schedules_survives_a_bad_schedule(db_url: str, tmp_path: Path) -> None:
    """The real CLI: ``worker --schedules --once`` fires the good schedules, executes their
    runs and exits 0; ``schedules list`` shows the bad one's error."""
    with Store.from_url(db_url) as store:
        _three_schedules(store, start=datetime.now(UTC) - timedelta(hours=3))
    log = tmp_path / "claims.log"
    env = subprocess_env(db_url, EVALSVC_TEST_CLAIM_LOG=str(log))
    result = run_cli(
        "evalsvc.cli.worker",
        "--schedules",
        "--once",
        "--poll",
        "0.1",
        "--executor",
        "tests.scheduler.executors:record_and_complete",
        env=env,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "schedule bad not fired" in result.stderr
    assert len(log.read_text().splitlines()) == 2
    listing = run_cli("evalsvc.cli.schedules", "list", "--json", env=env)
    assert listing.returncode == 0, listing.stderr
    assert '"last_error": "ValidationError' in listing.stdout
    table = run_cli("evalsvc.cli.schedules", "list", env={**env, "COLUMNS": "400"})
    assert table.returncode == 0 and "ValidationError" in table.stdout, table.stdout


def test_standalone_scheduler_survives_a_bad_schedule(store: Store) -> None:
    _three_schedules(store, start=datetime.now(UTC) - timedelta(hours=3))
    scheduler = Scheduler(store, interval_seconds=3600)
    assert len(scheduler.tick()) == 2
