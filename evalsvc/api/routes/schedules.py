"""``/schedules``: cron schedules that queue runs. Reads need ``read``, writes ``admin``.

The template's endpoint names are resolved and its suites checked when the schedule is
created, so a schedule never fires runs that workers would refuse.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Response, status

from evalsvc.api._schemas import PathKey, Problem, ScheduleCreate, ScheduleRead
from evalsvc.domain import stored_spec
from evalsvc.reports import redact_report
from evalsvc.services import registry
from evalsvc.web.auth import AdminScope, ReadScope, StoreDep

from .runs import run_spec

router = APIRouter(prefix="/schedules", tags=["schedules"])

_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": Problem}}


def _read(schedule: dict[str, Any]) -> ScheduleRead:
    # A template stored before a bound it breaks is still shown (it fails when it fires);
    # egress: templates stored before the userinfo rule may hold credentials in URLs.
    schedule = redact_report(schedule)
    if schedule.get("kind") == "sweep":
        return ScheduleRead.model_validate({**schedule, "template": None,
                                            "sweep": schedule["template"]})
    return ScheduleRead.model_validate({**schedule, "template": stored_spec(schedule["template"])})


@router.get("", response_model=list[ScheduleRead])
def list_schedules(store: StoreDep, _: ReadScope) -> list[ScheduleRead]:
    return [_read(s) for s in store.list_schedules()]


@router.post(
    "",
    response_model=ScheduleRead,
    status_code=status.HTTP_201_CREATED,
    responses={
        409: {"model": Problem, "description": "The name is taken."},
        422: {"model": Problem, "description": "Invalid cron, unknown suite or endpoint."},
    },
)
def create_schedule(body: ScheduleCreate, store: StoreDep, _: AdminScope) -> ScheduleRead:
    template = run_spec(body.template, store)
    # UsageError (422): unknown suite, invalid cron, what workers would refuse; Conflict (409).
    created = registry.add_schedule(
        store, name=body.name, cron=body.cron, template=template, start_at=body.start_at
    )
    return _read(created)


@router.get("/{name_or_id}", response_model=ScheduleRead, responses=_NOT_FOUND)
def get_schedule(name_or_id: PathKey, store: StoreDep, _: ReadScope) -> ScheduleRead:
    found = store.get_schedule(name_or_id)
    if found is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no schedule {name_or_id!r}")
    return _read(found)


@router.delete("/{name_or_id}", status_code=status.HTTP_204_NO_CONTENT, responses=_NOT_FOUND)
def delete_schedule(name_or_id: PathKey, store: StoreDep, _: AdminScope) -> Response:
    """Delete a schedule; the runs it created are kept."""
    try:
        registry.remove_schedule(store, name_or_id)
    except registry.NotFound as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from exc
    return Response(status_code=status.HTTP_204_NO_CONTENT)
