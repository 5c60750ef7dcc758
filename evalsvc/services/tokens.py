"""API tokens and what they let a caller do: one set of rules for the CLI, the REST API and the
dashboard.

Contract: a token's scopes nest (``admin`` ⊇ ``submit`` ⊇ ``read``, docs/api.md);
``principal(store, token)`` is the caller a bearer token stands for (None when the token is
unknown or revoked), with the implied scopes filled in. ``create``/``list_tokens``/``revoke``
are the token store's, with the scope names checked here first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from evalsvc.db import API_SCOPES, Store
from evalsvc.domain import TokenInfo

__all__ = [
    "ANONYMOUS",
    "API_SCOPES",
    "IMPLIED_SCOPES",
    "Principal",
    "create",
    "list_tokens",
    "principal",
    "revoke",
    "unknown_scopes",
]

#: What each scope a token holds lets it do (docs/api.md: admin ⊇ submit ⊇ read).
IMPLIED_SCOPES: dict[str, frozenset[str]] = {
    "read": frozenset({"read"}),
    "submit": frozenset({"read", "submit"}),
    "admin": frozenset({"read", "submit", "admin"}),
}


@dataclass(frozen=True)
class Principal:
    """Who is calling: the token's name and the scopes it grants (implied ones included)."""

    name: str
    scopes: frozenset[str]


#: The caller when authentication is off (``EVALSVC_API_AUTH=off``, local development).
ANONYMOUS = Principal(name="anonymous (auth off)", scopes=IMPLIED_SCOPES["admin"])


def principal(store: Store, token: str) -> Principal | None:
    """The principal of ``token``; None when it is unknown or revoked."""
    info = store.verify_api_token(token)
    if info is None:
        return None
    granted: set[str] = set()
    for scope in info.scopes:
        granted |= IMPLIED_SCOPES.get(scope, frozenset())
    return Principal(name=info.name, scopes=frozenset(granted))


def unknown_scopes(scopes: Sequence[str]) -> list[str]:
    """The names in ``scopes`` that are no scope (sorted)."""
    return sorted(set(scopes) - API_SCOPES)


def create(store: Store, *, name: str, scopes: Sequence[str]) -> tuple[str, TokenInfo]:
    """A new token ``(token, info)``; the token itself is shown only now (ValueError: no or
    unknown scopes; ``Conflict``: the name is taken)."""
    return store.create_api_token(name=name, scopes=scopes)


def list_tokens(store: Store) -> list[TokenInfo]:
    """Every token's name, scopes, creation, last use and revocation (never the token)."""
    return store.list_api_tokens()


def revoke(store: Store, name: str) -> bool:
    """Revoke the active token ``name``; False when there is none."""
    return store.revoke_api_token(name)
