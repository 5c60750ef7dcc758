"""What the per-aggregate stores share: row → domain converters, the sample column list, the
dialect INSERT, the one-row insert that maps a taken unique key to ``Conflict``.

Contract: ORM rows go in, domain objects (``evalsvc.domain``) come out; nothing here opens a
transaction of its own except ``insert_once``. ``SAMPLE_KEY`` and ``SAMPLE_VALUES`` are THE
sample columns: the store writes and reads them, the export (``_export``) lays them out.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import ValidationError
from sqlalchemy.dialects import postgresql, sqlite

from evalsvc.domain import EndpointRef, RunInfo, RunStatus, Sample, stored_spec

from ._errors import Conflict
from ._orm import EndpointRow, RunRow, SampleRow
from ._session import Database

R = TypeVar("R")
V = TypeVar("V")

TERMINAL = (RunStatus.completed.value, RunStatus.error.value, RunStatus.cancelled.value)

#: The unique key of a stored sample (``Sample.key`` plus the run).
SAMPLE_KEY = ("run_id", "endpoint", "suite", "item_id", "repeat")
#: The value columns of a sample, in the order exports lay them out; a retried item replaces
#: exactly these (plus ``created_at``).
SAMPLE_VALUES = (
    "output",
    "score",
    "prompt_tokens",
    "completion_tokens",
    "latency_s",
    "ttft_s",
    "error",
    "data",
)


def new_id() -> str:
    return uuid.uuid4().hex


def run_info(row: RunRow) -> RunInfo:
    return RunInfo(
        id=row.id,
        status=RunStatus(row.status),
        spec=stored_spec(row.spec),  # a run stored before a bound is still readable
        verdict=row.verdict,
        error=row.error,
        created_at=row.created_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
        attempts=row.attempts,
        lease_owner=row.lease_owner,
        lease_expires_at=row.lease_expires_at,
        progress=dict(row.progress or {}),
        schedule_id=row.schedule_id,
        submitted_by=row.submitted_by,
    )


def sample(row: SampleRow) -> Sample:
    values: dict[str, Any] = {c: getattr(row, c) for c in (*SAMPLE_KEY[1:], *SAMPLE_VALUES)}
    values["data"] = dict(row.data or {})
    return Sample(**values)


def sample_row(run_id: str, s: Sample, created_at: Any) -> dict[str, Any]:
    """The INSERT values of one sample (every column of ``SAMPLE_KEY`` + ``SAMPLE_VALUES``)."""
    values: dict[str, Any] = {c: getattr(s, c) for c in (*SAMPLE_KEY[1:], *SAMPLE_VALUES)}
    return {"run_id": run_id, **values, "created_at": created_at}


def endpoint_ref(row: EndpointRow) -> EndpointRef:
    return EndpointRef(
        url=row.url,
        model=row.model,
        name=row.name,
        api_key_env=row.api_key_env,
        tokenizer=row.tokenizer,
    )


def one_line_error(err: Exception) -> str:
    """A short, storable description of ``err`` (no NUL: PostgreSQL text cannot hold one)."""
    if isinstance(err, ValidationError):
        detail = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors()[:5]
        )
    else:
        detail = str(err)
    text = f"{type(err).__name__}: {detail}".replace("\n", " ").replace("\x00", "\\x00")
    return text[:2000]


def dialect_insert(db: Database, table: Any) -> Any:
    """A dialect INSERT supporting ON CONFLICT (both backends spell it the same way)."""
    return (postgresql.insert if db.dialect == "postgresql" else sqlite.insert)(table)


def insert_once(db: Database, row: R, view: Callable[[R], V], taken: str) -> V:
    """Insert ``row`` and return ``view(row)``; ``Conflict(taken)`` when a unique key exists
    (the database's index decides, so concurrent inserts of one name cannot both win)."""
    try:
        with db.session() as session:
            session.add(row)
            session.flush()
            return view(row)
    except Conflict as err:
        raise Conflict(taken) from err
