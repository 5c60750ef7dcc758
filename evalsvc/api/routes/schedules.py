"""``/schedules``: cron schedules that queue runs. Reads need ``read``, writes ``admin``.

The template's endpoint names are resolved and its suites checked when the schedule is
created, so a schedule never fires runs that workers would refuse.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Response, status

from evalsvc.api._deps import AdminScope, ReadScope, StoreDep
from evalsvc.api._schemas import PathKey, Problem, ScheduleCreate, ScheduleRead
from evalsvc.db import Conflict
from evalsvc.domain import stored_spec
from evalsvc.reports import redact_report
from evalsvc.services import runs as run_service

from .runs import run_spec

router = APIRouter(prefix="/schedules", tags=["schedules"])

_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": Problem}}


def _read(schedule: dict[str, Any]) -> ScheduleRead:
    # A template stored before a bound it breaks is still shown (it fails when it fires);
    # egress: templates stored before the userinfo rule may hold credentials in URLs.
    schedule = redact_report(schedule)
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
    run_service.load_suites(template, allow_paths=False)  # UsageError (422) for unknown suites
    run_service.check_server_spec(template, store=store)  # egress: 422, as POST /runs
    try:
        created = store.add_schedule(
            name=body.name, cron=body.cron, template=template, start_at=body.start_at
        )
    except Conflict:
        raise  # a duplicate name: 409 from the app's handler
    except ValueError as err:  # croniter's message for an invalid expression
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT, f"invalid cron {body.cron!r}: {err}"
        ) from err
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
    if not store.remove_schedule(name_or_id):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no schedule {name_or_id!r}")
    return Response(status_code=status.HTTP_204_NO_CONTENT)
