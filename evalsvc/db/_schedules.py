"""The schedule aggregate: cron math, firing (query functions; ``session`` keyword-only) and
``ScheduleStore``, the transactions over them. A schedule of kind ``run`` queues a run from its
template; one of kind ``sweep`` queues a sweep (``_sweeps``) from the sweep spec it holds,
with the same exactly-once rule (``sweeps(schedule_id, fire_time)`` is unique too).

Policy for missed fire times ("catch-up: latest"): when a scheduler looks at a schedule whose
fire times since the last fire include several past instants (the schedulers were down, or
the interval is shorter than the scheduler's tick), it creates ONE run, for the latest of
those instants, and skips the others. Rationale: a quality gate on a deployment answers
"is it fine now"; replaying a backlog of identical evaluations after downtime would only
queue redundant load against the same endpoints.

Cron expressions are evaluated in UTC. Exactly-once per (schedule, fire_time) holds across any
number of concurrent schedulers: the schedule row is locked while firing (``FOR UPDATE`` on
PostgreSQL, the writer lock on SQLite), and a unique constraint on ``runs(schedule_id,
fire_time)`` backs that up.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from croniter import croniter
from sqlalchemy.orm import Session

from evalsvc.domain import RunInfo, RunSpec, RunStatus

from . import _queue
from ._errors import DatabaseUnavailable, StoreError
from ._orm import RunRow, ScheduleRow, utcnow
from ._rows import insert_once, new_id, one_line_error, run_info
from ._runs import add_run_row
from ._session import Database
from ._sweeps import add_sweep_row, sweep_fire_exists

log = logging.getLogger(__name__)


def validate_cron(cron: str) -> None:
    """Raise ValueError carrying croniter's message when ``cron`` is not a valid expression."""
    try:
        croniter(cron)
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"invalid cron expression {cron!r}: {err}") from err


def next_fire_time(cron: str, after: datetime) -> datetime:
    """The first fire time strictly after ``after`` (UTC)."""
    result: datetime = croniter(cron, after.astimezone(UTC)).get_next(datetime)
    return result.astimezone(UTC)


def latest_fire_time(cron: str, *, after: datetime, now: datetime) -> datetime | None:
    """The latest fire time in ``(after, now]``, or None if there is none."""
    first = next_fire_time(cron, after)
    if first > now:
        return None
    # get_prev is strictly before its start; start one second past ``now`` (cron resolution is
    # at most one second) so that a fire time equal to ``now`` counts as due.
    start = now.astimezone(UTC).replace(microsecond=0) + timedelta(seconds=1)
    latest: datetime = croniter(cron, start).get_prev(datetime)
    latest = latest.astimezone(UTC)
    return max(latest, first) if latest <= now else first


def due_schedule_ids(session: Session, *, now: datetime) -> list[str]:
    """Ids of enabled schedules with a fire time due (not locked: each is locked as it fires)."""
    stmt = (
        sa.select(ScheduleRow.id)
        .where(ScheduleRow.enabled.is_(True))
        .where(sa.or_(ScheduleRow.next_fire_time.is_(None), ScheduleRow.next_fire_time <= now))
        .order_by(ScheduleRow.id)
    )
    return list(session.scalars(stmt))


def lock_due_schedule(
    session: Session, schedule_id: str, *, now: datetime, dialect: str
) -> ScheduleRow | None:
    """The schedule, locked for this transaction, if it is still enabled and due."""
    stmt = (
        sa.select(ScheduleRow)
        .where(ScheduleRow.id == schedule_id, ScheduleRow.enabled.is_(True))
        .where(sa.or_(ScheduleRow.next_fire_time.is_(None), ScheduleRow.next_fire_time <= now))
    )
    if dialect == "postgresql":
        stmt = stmt.with_for_update()
    return session.scalar(stmt)


def fire_exists(session: Session, *, schedule_id: str, fire_time: datetime) -> bool:
    stmt = sa.select(RunRow.id).where(
        RunRow.schedule_id == schedule_id, RunRow.fire_time == fire_time
    )
    return session.scalar(stmt) is not None


def _schedule_dict(row: ScheduleRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "name": row.name,
        "cron": row.cron,
        "template": dict(row.template),
        "enabled": row.enabled,
        "start_at": row.start_at,
        "last_fire_time": row.last_fire_time,
        "next_fire_time": row.next_fire_time,
        "created_at": row.created_at,
        "last_error": row.last_error,
        "last_error_at": row.last_error_at,
        "kind": row.kind,
    }


class ScheduleStore:
    """Cron schedules and the runs they fire."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def add_schedule(
        self,
        *,
        name: str,
        cron: str,
        template: RunSpec | None = None,
        start_at: datetime | None = None,
        sweep: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Create a schedule; it first fires at the first cron time after ``start_at`` (now).
        It queues a run from ``template``, or (``sweep``: a sweep spec as JSON, already
        validated by the sweep service) a sweep.

        Raises ValueError (croniter's message) for an invalid cron expression, Conflict (also
        a ValueError) when the name is taken.
        """
        validate_cron(cron)
        if (template is None) == (sweep is None):
            raise ValueError("a schedule holds either a run template or a sweep")
        now = utcnow()
        start = start_at or now
        row = ScheduleRow(
            id=new_id(),
            name=name,
            cron=cron,
            template=template.model_dump(mode="json") if template is not None else sweep,
            kind="run" if template is not None else "sweep",
            enabled=True,
            start_at=start,
            created_at=now,
            next_fire_time=next_fire_time(cron, start),
        )
        return insert_once(self._db, row, _schedule_dict, f"a schedule named {name!r} already exists")

    def list_schedules(self) -> list[dict[str, Any]]:
        with self._db.session(write=False) as session:
            rows = session.scalars(sa.select(ScheduleRow).order_by(ScheduleRow.name))
            return [_schedule_dict(row) for row in rows]

    def get_schedule(self, name_or_id: str) -> dict[str, Any] | None:
        with self._db.session(write=False) as session:
            row = session.scalar(
                sa.select(ScheduleRow).where(
                    sa.or_(ScheduleRow.name == name_or_id, ScheduleRow.id == name_or_id)
                )
            )
            return _schedule_dict(row) if row is not None else None

    def remove_schedule(self, name_or_id: str) -> bool:
        """Delete a schedule; its past runs stay (their schedule_id becomes NULL)."""
        with self._db.session() as session:
            result = session.execute(
                sa.delete(ScheduleRow).where(
                    sa.or_(ScheduleRow.name == name_or_id, ScheduleRow.id == name_or_id)
                )
            )
            return _queue.rowcount(result) >= 1

    def fire_due_schedules(self, *, now: datetime) -> list[RunInfo]:
        """Create the runs of due schedules (policy "catch-up: latest", see ``_schedules``).

        Idempotent on (schedule, fire_time): any number of schedulers may call this
        concurrently with any ``now``; each fire time yields at most one run. Each schedule
        fires in its own transaction: one that cannot be queued (its template no longer
        validates, the database refuses a value) is skipped until its next fire time with
        ``last_error`` set, and the others fire. Only ``DatabaseUnavailable`` propagates.
        """
        with self._db.session(write=False) as session:
            due = due_schedule_ids(session, now=now)
        created: list[RunInfo] = []
        for schedule_id in due:
            try:
                run = self._fire_schedule(schedule_id, now=now)
            except DatabaseUnavailable:
                raise
            except Exception as err:  # noqa: BLE001 - any failure stays with its schedule
                self._record_schedule_error(schedule_id, now=now, err=err)
                continue
            if run is not None:
                created.append(run)
        return created

    def _fire_schedule(self, schedule_id: str, *, now: datetime) -> RunInfo | None:
        with self._db.session() as session:
            schedule = lock_due_schedule(
                session, schedule_id, now=now, dialect=self._db.dialect
            )
            if schedule is None:  # fired by another scheduler meanwhile, disabled or removed
                return None
            anchor = max(t for t in (schedule.start_at, schedule.last_fire_time) if t)
            fire_time = latest_fire_time(schedule.cron, after=anchor, now=now)
            if fire_time is None:
                schedule.next_fire_time = next_fire_time(schedule.cron, anchor)
                return None
            run: RunInfo | None = None
            if schedule.kind == "sweep":
                if not sweep_fire_exists(session, schedule_id=schedule.id, fire_time=fire_time):
                    add_sweep_row(session, dict(schedule.template), now=utcnow(),
                                  schedule_id=schedule.id, fire_time=fire_time)
            elif not fire_exists(session, schedule_id=schedule.id, fire_time=fire_time):
                spec = RunSpec.model_validate(schedule.template)
                row = add_run_row(
                    session,
                    spec,
                    status=RunStatus.queued,
                    now=utcnow(),
                    schedule_id=schedule.id,
                    fire_time=fire_time,
                )
                session.flush()  # a value the database refuses fails here, inside this schedule
                run = run_info(row)
            schedule.last_fire_time = fire_time
            schedule.next_fire_time = next_fire_time(schedule.cron, fire_time)
            schedule.last_error = None
            schedule.last_error_at = None
            return run

    def _record_schedule_error(self, schedule_id: str, *, now: datetime, err: Exception) -> None:
        """Keep the error on the schedule and skip it until its next fire time after ``now``
        (disable it when there is none to compute)."""
        message = one_line_error(err)
        try:
            with self._db.session() as session:
                schedule = session.get(ScheduleRow, schedule_id)
                if schedule is None:
                    return
                schedule.last_error, schedule.last_error_at = message, now
                try:
                    schedule.next_fire_time = next_fire_time(schedule.cron, now)
                except Exception:  # noqa: BLE001 - croniter cannot compute one: stop firing it
                    schedule.enabled, schedule.next_fire_time = False, None
                    schedule.last_error = f"{message} (schedule disabled: no next fire time)"
                log.warning("schedule %s not fired: %s", schedule.name, schedule.last_error)
        except StoreError as store_err:
            log.error(
                "schedule %s not fired (%s); could not record it: %s",
                schedule_id,
                message,
                store_err,
            )
