"""The web app's state and authentication, shared by the REST API and the dashboard.

The composition module (``evalsvc.webapp``) puts an ``AppState`` on the app; the API's routes
and the dashboard's pages declare what they need through the dependencies here, and import
nothing from each other or from the composition.

Contract:
- ``StoreDep`` is the app's one ``Store``. Until the database has been seen at the migration
  head, every request that needs it re-checks and gets 503 with the store's message (run
  ``evalsvc db upgrade``); once at head, the check is not repeated.
- ``require(scope)`` authenticates ``Authorization: Bearer <token>`` through the token service
  (``evalsvc.services.tokens``): 401 without a valid token, 403 when the token lacks the scope.
  Scopes nest: ``admin`` implies ``submit`` implies ``read``.
- ``EVALSVC_API_AUTH=off`` (or ``create_app(auth=False)``) turns authentication off for local
  development; every request then acts with all scopes.
- ``principal_for_token`` is the same check for a token that arrives another way: the web
  dashboard's HttpOnly cookie (``evalsvc.dashboard``), accepted on dashboard routes only.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CollectorRegistry

from evalsvc.db import Store, StoreError
from evalsvc.services import tokens
from evalsvc.services.tokens import IMPLIED_SCOPES, Principal
from evalsvc.settings import Settings

AUTH_ENV = "EVALSVC_API_AUTH"
_OFF = {"off", "0", "false", "no", "disabled"}

def auth_enabled_from_env() -> bool:
    """Authentication is on unless ``EVALSVC_API_AUTH`` says off/0/false/no/disabled."""
    return Settings().api_auth.strip().lower() not in _OFF


@dataclass
class AppState:
    """What one app instance holds: its store, its auth mode, its metrics registry."""

    store: Store
    auth: bool
    registry: CollectorRegistry
    ready: bool = False
    """The database was seen at head (then it is not re-checked per request)."""
    ready_error: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def check_ready(self) -> bool:
        """(Re-)check that the database is reachable and at head; remember success."""
        with self._lock:
            try:
                self.store.check_at_head()
            except StoreError as err:
                self.ready, self.ready_error = False, str(err)
            else:
                self.ready, self.ready_error = True, None
            return self.ready


    def check_serving(self) -> bool:
        """Readiness (``/healthz``): at head, and the database accepts writes (a read-only or
        full database can still serve reads, but not queue runs: not ready)."""
        if not self.check_ready():
            return False
        try:
            self.store.check_writable()
        except StoreError as err:
            self.ready_error = str(err)
            return False
        return True


def get_state(request: Request) -> AppState:
    state: AppState = request.app.state.evalsvc
    return state


StateDep = Annotated[AppState, Depends(get_state)]


def get_store(state: StateDep) -> Store:
    """The app's store; 503 while the database is unreachable or not at head."""
    if not state.ready and not state.check_ready():
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, state.ready_error)
    return state.store


StoreDep = Annotated[Store, Depends(get_store)]

_bearer = HTTPBearer(
    auto_error=False,
    description="An API token from `evalsvc tokens create NAME --scope read|submit|admin`.",
)


def _authenticate(
    state: AppState, store: Store, credentials: HTTPAuthorizationCredentials | None
) -> Principal:
    if not state.auth:
        return tokens.ANONYMOUS
    challenge = {"WWW-Authenticate": "Bearer"}
    if credentials is None or credentials.scheme.lower() != "bearer" or not credentials.credentials:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "missing bearer token: send 'Authorization: Bearer <token>'",
            headers=challenge,
        )
    return principal_for_token(store, credentials.credentials)


def principal_for_token(store: Store, token: str) -> Principal:
    """The principal of a token (header or the dashboard's cookie); 401 when unknown/revoked."""
    found = tokens.principal(store, token)
    if found is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "invalid or revoked API token",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return found


def require(scope: str) -> Any:
    """A dependency that authenticates the caller and demands ``scope``."""
    if scope not in IMPLIED_SCOPES:
        raise ValueError(f"unknown scope {scope!r}")

    def dependency(
        state: StateDep,
        store: StoreDep,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> Principal:
        principal = _authenticate(state, store, credentials)
        if scope not in principal.scopes:
            raise HTTPException(
                status.HTTP_403_FORBIDDEN,
                f"token {principal.name!r} lacks the {scope!r} scope "
                f"(it has {sorted(principal.scopes)})",
            )
        return principal

    return Depends(dependency)


ReadScope = Annotated[Principal, require("read")]
SubmitScope = Annotated[Principal, require("submit")]
AdminScope = Annotated[Principal, require("admin")]
