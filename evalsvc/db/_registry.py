"""The endpoint registry: names an operator registered for base URLs (and key variables, and
the model's tokenizer path for engines without a tokenize route).

Contract: ``EndpointRef`` in and out; a taken name is ``Conflict`` on ``create_endpoint``.
"""

from __future__ import annotations

import sqlalchemy as sa

from evalsvc.domain import EndpointRef

from ._orm import EndpointRow, utcnow
from ._queue import rowcount
from ._rows import endpoint_ref, insert_once, new_id
from ._session import Database


class EndpointRegistry:
    """Registered endpoints by name."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def upsert_endpoint(
        self,
        *,
        name: str,
        url: str,
        model: str | None = None,
        api_key_env: str | None = None,
        tokenizer: str | None = None,
    ) -> EndpointRef:
        now = utcnow()
        with self._db.session() as session:
            row = session.scalar(sa.select(EndpointRow).where(EndpointRow.name == name))
            if row is None:
                row = EndpointRow(id=new_id(), name=name, created_at=now, url=url)
                session.add(row)
            row.url, row.model, row.api_key_env = url, model, api_key_env
            row.tokenizer, row.updated_at = tokenizer, now
            session.flush()
            return endpoint_ref(row)

    def create_endpoint(
        self,
        *,
        name: str,
        url: str,
        model: str | None = None,
        api_key_env: str | None = None,
        tokenizer: str | None = None,
    ) -> EndpointRef:
        """Register a new name; ``Conflict`` when it exists (the unique index decides, so two
        concurrent creates cannot both succeed)."""
        now = utcnow()
        row = EndpointRow(
            id=new_id(),
            name=name,
            url=url,
            model=model,
            api_key_env=api_key_env,
            tokenizer=tokenizer,
            created_at=now,
            updated_at=now,
        )
        return insert_once(self._db, row, endpoint_ref, f"an endpoint named {name!r} already exists")

    def get_endpoint(self, name: str) -> EndpointRef | None:
        with self._db.session(write=False) as session:
            row = session.scalar(sa.select(EndpointRow).where(EndpointRow.name == name))
            return endpoint_ref(row) if row is not None else None

    def list_endpoints(self) -> list[EndpointRef]:
        with self._db.session(write=False) as session:
            rows = session.scalars(sa.select(EndpointRow).order_by(EndpointRow.name))
            return [endpoint_ref(row) for row in rows]

    def delete_endpoint(self, name: str) -> bool:
        with self._db.session() as session:
            result = session.execute(sa.delete(EndpointRow).where(EndpointRow.name == name))
            return rowcount(result) == 1
