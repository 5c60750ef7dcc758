"""Cron math and schedule firing (query functions; ``session`` is keyword-only).

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

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from croniter import croniter
from sqlalchemy.orm import Session

from ._orm import RunRow, ScheduleRow


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
