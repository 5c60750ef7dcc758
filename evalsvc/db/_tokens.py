"""API tokens: creation (shown once), verification by hash, revocation, scopes.

Contract: a token is ``evs_`` + 256 random bits; only its SHA-256 is stored. What a scope
implies (``IMPLIED_SCOPES``) and the principal a token stands for are the token service's
(``evalsvc.services.tokens``).
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import Sequence
from datetime import timedelta

import sqlalchemy as sa

from evalsvc.domain import TokenInfo

from ._errors import DatabaseUnavailable, DatabaseWriteRefused
from ._orm import ApiTokenRow, utcnow
from ._queue import rowcount
from ._rows import insert_once, new_id
from ._session import Database

log = logging.getLogger(__name__)

API_SCOPES = frozenset({"read", "submit", "admin"})
#: ``last_used_at`` of a token is recorded at most this often (one write per token per minute,
#: not one per request).
TOKEN_USE_RESOLUTION = timedelta(minutes=1)


def _hash_token(token: str) -> str:
    # Tokens are 256-bit random strings, so an unsalted fast hash is not brute-forceable; it
    # lets verification be one indexed lookup.
    return hashlib.sha256(token.encode()).hexdigest()


def _token_info(row: ApiTokenRow) -> TokenInfo:
    return TokenInfo(
        id=row.id,
        name=row.name,
        scopes=list(row.scopes),
        created_at=row.created_at,
        last_used_at=row.last_used_at,
        revoked_at=row.revoked_at,
    )


class TokenStore:
    """Bearer tokens of the REST API and the dashboard."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def create_api_token(self, *, name: str, scopes: Sequence[str]) -> tuple[str, TokenInfo]:
        """Create a bearer token; returns ``(token, info)``. The token is shown only now."""
        unknown = set(scopes) - API_SCOPES
        if unknown or not scopes:
            raise ValueError(f"scopes must be a non-empty subset of {sorted(API_SCOPES)}")
        token = "evs_" + secrets.token_urlsafe(32)
        row = ApiTokenRow(
            id=new_id(),
            name=name,
            token_hash=_hash_token(token),
            scopes=sorted(set(scopes)),
            created_at=utcnow(),
        )
        info = insert_once(self._db, row, _token_info, f"an API token named {name!r} already exists")
        return token, info

    def verify_api_token(self, token: str) -> TokenInfo | None:
        """The token's info (name, scopes) if it exists and is not revoked, else None.

        A read. ``last_used_at`` is then recorded best-effort, at most once a minute per token:
        a database that refuses writes (read-only, disk full) or is busy must not turn every
        authenticated read into a 503."""
        digest = _hash_token(token)
        with self._db.session(write=False) as session:
            row = session.scalar(sa.select(ApiTokenRow).where(ApiTokenRow.token_hash == digest))
            if row is None or row.revoked_at is not None:
                return None
            info = _token_info(row)
        now = utcnow()
        last = info.last_used_at
        if last is None or last < now - TOKEN_USE_RESOLUTION:
            try:
                with self._db.session() as session:
                    session.execute(
                        sa.update(ApiTokenRow)
                        .where(ApiTokenRow.token_hash == digest)
                        .values(last_used_at=now)
                    )
                info = info.model_copy(update={"last_used_at": now})
            except (DatabaseWriteRefused, DatabaseUnavailable) as err:
                log.warning("token %s: last use not recorded: %s", info.name, err)
        return info

    def list_api_tokens(self) -> list[TokenInfo]:
        with self._db.session(write=False) as session:
            rows = session.scalars(sa.select(ApiTokenRow).order_by(ApiTokenRow.name))
            return [_token_info(row) for row in rows]

    def revoke_api_token(self, name: str) -> bool:
        with self._db.session() as session:
            result = session.execute(
                sa.update(ApiTokenRow)
                .where(ApiTokenRow.name == name, ApiTokenRow.revoked_at.is_(None))
                .values(revoked_at=utcnow())
            )
            return rowcount(result) == 1
