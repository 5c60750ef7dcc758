"""The blessed-baseline aggregate (``blessed_baselines``, migration 0007).

Contract: a blessing is a plain dict (``id``, ``fingerprint``, ``suite``, ``endpoint_url``,
``endpoint`` (the identity of the endpoint it was measured on, migration 0009; None on older
blessings), ``key``, ``run_id``, ``run_ids``, ``items``, ``noise``, ``note``, ``blessed_by``,
``created_at``, ``revoked_at``, ``revoked_by``); ORM rows never leave. ``find`` returns the
newest unrevoked blessing of a fingerprint measured on an endpoint identity (a later blessing
of the same key and endpoint supersedes an earlier one without revoking it), or on any
endpoint when ``endpoint`` is None (so a run can say whose blessing did not apply);
``latest_for_suite`` the newest unrevoked one of a suite on an endpoint (or, for blessings
from before identities, its baseline URL) whatever its fingerprint, so a run whose key changed
can name what changed.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa

from ._orm import BlessedBaselineRow, utcnow
from ._rows import new_id
from ._session import Database

_FIELDS = (
    "id", "fingerprint", "suite", "endpoint_url", "key", "run_id", "run_ids", "items", "noise",
    "note", "blessed_by", "created_at", "revoked_at", "revoked_by", "endpoint",
)


def _dict(row: BlessedBaselineRow) -> dict[str, Any]:
    out = {f: getattr(row, f) for f in _FIELDS}
    out["key"] = dict(row.key or {})
    out["run_ids"] = list(row.run_ids or [])
    return out


class BlessedStore:
    """Stored blessings: add, read, list, revoke."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def add(
        self,
        *,
        fingerprint: str,
        suite: str,
        endpoint_url: str,
        endpoint: str | None,
        key: dict[str, Any],
        run_ids: list[str],
        items: int,
        noise: dict[str, Any] | None,
        note: str | None,
        blessed_by: str | None,
        now: datetime | None = None,
    ) -> dict[str, Any]:
        """Store one blessing; ``run_ids[0]`` is the run whose samples are reused."""
        row = BlessedBaselineRow(
            id=new_id(), fingerprint=fingerprint, suite=suite, endpoint_url=endpoint_url,
            endpoint=endpoint, key=key, run_id=run_ids[0], run_ids=run_ids, items=items, noise=noise, note=note,
            blessed_by=blessed_by, created_at=now or utcnow(),
        )
        with self._db.session() as session:
            session.add(row)
            session.flush()
            return _dict(row)

    def get(self, blessing_id: str) -> dict[str, Any] | None:
        with self._db.session(write=False) as session:
            row = session.get(BlessedBaselineRow, blessing_id)
            return _dict(row) if row is not None else None

    def find(self, fingerprint: str, *, endpoint: str | None) -> dict[str, Any] | None:
        """The newest unrevoked blessing of ``fingerprint`` measured on the endpoint identity
        ``endpoint`` (None: on any endpoint, identities recorded or not)."""
        stmt = (
            sa.select(BlessedBaselineRow)
            .where(BlessedBaselineRow.fingerprint == fingerprint,
                   BlessedBaselineRow.revoked_at.is_(None))
            .order_by(BlessedBaselineRow.created_at.desc(), BlessedBaselineRow.id)
            .limit(1)
        )
        if endpoint is not None:
            stmt = stmt.where(BlessedBaselineRow.endpoint == endpoint)
        with self._db.session(write=False) as session:
            row = session.scalar(stmt)
            return _dict(row) if row is not None else None

    def latest_for_suite(self, suite: str, *, endpoint: str, endpoint_url: str
                         ) -> dict[str, Any] | None:
        """The newest unrevoked blessing of ``suite`` measured on the endpoint identity
        ``endpoint``, or (a blessing from before identities) on the baseline ``endpoint_url``."""
        stmt = (
            sa.select(BlessedBaselineRow)
            .where(BlessedBaselineRow.suite == suite,
                   sa.or_(BlessedBaselineRow.endpoint == endpoint,
                          sa.and_(BlessedBaselineRow.endpoint.is_(None),
                                  BlessedBaselineRow.endpoint_url == endpoint_url)),
                   BlessedBaselineRow.revoked_at.is_(None))
            .order_by(BlessedBaselineRow.created_at.desc(), BlessedBaselineRow.id)
            .limit(1)
        )
        with self._db.session(write=False) as session:
            row = session.scalar(stmt)
            return _dict(row) if row is not None else None

    def list_all(self, *, include_revoked: bool = False, suite: str | None = None,
             limit: int = 100) -> list[dict[str, Any]]:
        """Blessings, newest first."""
        stmt = sa.select(BlessedBaselineRow).order_by(
            BlessedBaselineRow.created_at.desc(), BlessedBaselineRow.id
        ).limit(max(1, limit))
        if not include_revoked:
            stmt = stmt.where(BlessedBaselineRow.revoked_at.is_(None))
        if suite is not None:
            stmt = stmt.where(BlessedBaselineRow.suite == suite)
        with self._db.session(write=False) as session:
            return [_dict(row) for row in session.scalars(stmt)]

    def for_run(self, run_id: str) -> list[dict[str, Any]]:
        """Unrevoked blessings whose reused samples are ``run_id``'s (the dashboard's run page)."""
        stmt = sa.select(BlessedBaselineRow).where(
            BlessedBaselineRow.run_id == run_id, BlessedBaselineRow.revoked_at.is_(None)
        ).order_by(BlessedBaselineRow.created_at.desc())
        with self._db.session(write=False) as session:
            return [_dict(row) for row in session.scalars(stmt)]

    def revoke(self, blessing_id: str, *, by: str | None = None) -> dict[str, Any] | None:
        """Mark a blessing revoked (kept, so reports that reused it still resolve); None if
        there is no such blessing. Revoking twice keeps the first time."""
        with self._db.session() as session:
            row = session.get(BlessedBaselineRow, blessing_id)
            if row is None:
                return None
            if row.revoked_at is None:
                row.revoked_at, row.revoked_by = utcnow(), by
            session.flush()
            return _dict(row)
