"""Schedules: cron math, the missed-fire policy ("catch-up: latest"), exactly one run per fire
time under concurrent schedulers (threads and real processes), and refusal of bad cron."""

from __future__ import annotations

import subprocess
import threading
from datetime import UTC, datetime, timedelta

import pytest
from typer.testing import CliRunner

from evalsvc.cli.schedules import app as schedules_app
from evalsvc.db import Conflict, Store
from evalsvc.db._schedules import latest_fire_time, next_fire_time
from evalsvc.scheduler import Scheduler
from tests.fixtures.db import evalsvc_module, make_spec, subprocess_env, utc

HOURLY = "0 * * * *"


def test_cron_math() -> None:
    assert next_fire_time(HOURLY, utc(2025, 1, 1, 10, 0)) == utc(2025, 1, 1, 11, 0)
    assert next_fire_time(HOURLY, utc(2025, 1, 1, 10, 30)) == utc(2025, 1, 1, 11, 0)
    # (after, now]: a fire time equal to `now` is due, one equal to `after` is not
    assert latest_fire_time(
        HOURLY, after=utc(2025, 1, 1, 10, 0), now=utc(2025, 1, 1, 11, 0)
    ) == utc(2025, 1, 1, 11, 0)
    assert (
        latest_fire_time(HOURLY, after=utc(2025, 1, 1, 10, 0), now=utc(2025, 1, 1, 10, 59, 59))
        is None
    )
    assert latest_fire_time(
        HOURLY, after=utc(2025, 1, 1, 4, 10), now=utc(2025, 1, 1, 9, 30)
    ) == utc(2025, 1, 1, 9, 0)


def test_missed_fires_collapse_to_the_latest(store: Store) -> None:
    start = utc(2025, 1, 1, 4, 10)
    schedule = store.add_schedule(name="nightly", cron=HOURLY, template=make_spec(), start_at=start)
    assert schedule["next_fire_time"] == utc(2025, 1, 1, 5, 0)
    assert store.fire_due_schedules(now=utc(2025, 1, 1, 4, 59)) == []
    # down from 04:10 to 09:30: fire times 05:00..09:00 were missed -> one run, for 09:00
    runs = store.fire_due_schedules(now=utc(2025, 1, 1, 9, 30))
    assert len(runs) == 1 and runs[0].schedule_id == schedule["id"]
    assert runs[0].spec == make_spec()
    assert store.fire_due_schedules(now=utc(2025, 1, 1, 9, 45)) == []
    (listed,) = store.list_schedules()
    assert listed["last_fire_time"] == utc(2025, 1, 1, 9, 0)
    assert listed["next_fire_time"] == utc(2025, 1, 1, 10, 0)
    assert len(store.fire_due_schedules(now=utc(2025, 1, 1, 10, 0))) == 1
    # an earlier `now` (a scheduler with a slow clock) never re-fires an old time
    assert store.fire_due_schedules(now=utc(2025, 1, 1, 9, 0)) == []
    assert len(store.list_runs(schedule_id=schedule["id"])) == 2


def test_concurrent_schedulers_fire_once_per_time(db_url: str) -> None:
    with Store.from_url(db_url) as store:
        schedule = store.add_schedule(
            name="race", cron="*/5 * * * *", template=make_spec(), start_at=utc(2025, 1, 1, 0, 0)
        )
    stores = [Store.from_url(db_url) for _ in range(6)]
    barrier = threading.Barrier(len(stores))
    created: list[int] = []

    def fire(store: Store, now: datetime) -> None:
        barrier.wait()
        created.append(len(store.fire_due_schedules(now=now)))

    for now in (utc(2025, 1, 1, 0, 5), utc(2025, 1, 1, 0, 7), utc(2025, 1, 1, 0, 10)):
        threads = [threading.Thread(target=fire, args=(s, now)) for s in stores]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    for s in stores:
        s.close()
    assert sum(created) == 2  # 00:05 and 00:10
    with Store.from_url(db_url) as store:
        runs = store.list_runs(schedule_id=schedule["id"])
    assert len(runs) == 2


def test_two_scheduler_processes_one_run(db_url: str) -> None:
    with Store.from_url(db_url) as store:
        schedule = store.add_schedule(
            name="every-minute",
            cron="* * * * *",
            template=make_spec(),
            start_at=datetime.now(UTC) - timedelta(minutes=10),
        )
    env = subprocess_env(db_url)
    procs = [
        subprocess.Popen(
            evalsvc_module("evalsvc.cli.schedules", "run", "--once"),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    with Store.from_url(db_url) as store:
        runs = store.list_runs(schedule_id=schedule["id"])
        # Both fired within the same minute unless the clock crossed a minute boundary
        # between them; either way, never two runs for one fire time.
        assert 1 <= len(runs) <= 2
        assert sum("queued 1 run" in out for out in outputs) == len(runs)


def test_scheduler_tick_and_worker_flag(store: Store) -> None:
    store.add_schedule(
        name="s",
        cron="* * * * *",
        template=make_spec(),
        start_at=datetime.now(UTC) - timedelta(minutes=3),
    )
    scheduler = Scheduler(store, interval_seconds=3600)
    assert len(scheduler.maybe_tick()) == 1
    assert scheduler.maybe_tick() == []  # interval not elapsed


def test_invalid_cron_and_duplicates_are_refused(
    store: Store, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVALSVC_ALLOWED_ENDPOINTS", "127.0.0.0/8")
    with pytest.raises(ValueError, match="out of range"):
        store.add_schedule(name="bad", cron="61 * * * *", template=make_spec())
    with pytest.raises(ValueError, match="columns"):
        store.add_schedule(name="bad", cron="every hour", template=make_spec())
    store.add_schedule(name="ok", cron=HOURLY, template=make_spec())
    with pytest.raises(Conflict, match="already exists"):
        store.add_schedule(name="ok", cron=HOURLY, template=make_spec())
    runner = CliRunner()
    base = [
        "--baseline",
        "http://127.0.0.1:9001/v1",
        "--candidate",
        "http://127.0.0.1:9002/v1",
        "--suite",
        "needle-4k",
        "--database-url",
        db_url,
    ]
    bad = runner.invoke(schedules_app, ["add", "cli-bad", "--cron", "* * *", *base])
    assert bad.exit_code == 2 and "invalid cron expression" in bad.output


def test_cli_add_list_remove(
    store: Store, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Schedules are checked against what workers (server mode) accept: loopback must be allowed.
    monkeypatch.setenv("EVALSVC_ALLOWED_ENDPOINTS", "127.0.0.0/8")
    store.upsert_endpoint(name="bf16", url="http://127.0.0.1:9001/v1", model="smollm2")
    runner = CliRunner()
    added = runner.invoke(
        schedules_app,
        [
            "add",
            "nightly",
            "--cron",
            "0 3 * * *",
            "--baseline",
            "bf16",
            "--candidate",
            "http://127.0.0.1:9002/v1",
            "--suite",
            "needle-4k",
            "--samples",
            "50",
            "--label",
            "team=infra",
            "--database-url",
            db_url,
        ],
    )
    assert added.exit_code == 0, added.output
    assert "next run at" in added.output
    (schedule,) = store.list_schedules()
    assert schedule["template"]["baseline"]["model"] == "smollm2"
    assert schedule["template"]["options"]["samples"] == 50
    assert schedule["template"]["labels"] == {"team": "infra"}
    unknown = runner.invoke(
        schedules_app,
        [
            "add",
            "x",
            "--cron",
            "0 3 * * *",
            "--baseline",
            "nope",
            "--candidate",
            "nope2",
            "--suite",
            "s",
            "--database-url",
            db_url,
        ],
    )
    assert unknown.exit_code == 2 and "registered endpoint" in unknown.output
    listed = runner.invoke(schedules_app, ["list", "--database-url", db_url])
    assert listed.exit_code == 0 and "nightly" in listed.output
    # removing a schedule keeps the runs it created
    store.fire_due_schedules(now=datetime.now(UTC) + timedelta(days=2))
    assert (
        runner.invoke(schedules_app, ["remove", "nightly", "--database-url", db_url]).exit_code == 0
    )
    assert store.list_schedules() == [] and len(store.list_runs()) == 1
    assert (
        runner.invoke(schedules_app, ["remove", "nightly", "--database-url", db_url]).exit_code == 2
    )  # an unknown name is a usage error, as everywhere
