"""``/endpoints``: the endpoint registry (names usable in runs and schedules).

Reads need the ``read`` scope, writes ``admin``. Writes are checked against the server's
egress policy (host, ``api_key_env`` prefix, ``tokenizer`` paths only under
``EVALSVC_TOKENIZER_ROOT``; docs/security.md) and URLs are shown redacted.
"""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Response, status

from evalsvc.api._schemas import EndpointCreate, EndpointRead, EndpointUpdate, PathKey, Problem
from evalsvc.domain import EndpointRef
from evalsvc.endpoints import redact_url
from evalsvc.services import registry
from evalsvc.services.runs import server_policy
from evalsvc.web.auth import AdminScope, ReadScope, StoreDep

router = APIRouter(prefix="/endpoints", tags=["endpoints"])


def _not_found(name: str) -> HTTPException:
    return HTTPException(status.HTTP_404_NOT_FOUND, f"no endpoint named {name!r}")


def _read(ref: EndpointRef) -> EndpointRead:
    # Registrations older than the userinfo rule may hold one: never show it.
    return EndpointRead.of(ref.model_copy(update={"url": redact_url(ref.url)}))


@router.get("", response_model=list[EndpointRead])
def list_endpoints(store: StoreDep, _: ReadScope) -> list[EndpointRead]:
    """Every registered endpoint, by name."""
    return [_read(ref) for ref in store.list_endpoints()]


@router.post(
    "",
    response_model=EndpointRead,
    status_code=status.HTTP_201_CREATED,
    responses={409: {"model": Problem, "description": "The name is taken."}},
)
def create_endpoint(body: EndpointCreate, store: StoreDep, _: AdminScope) -> EndpointRead:
    """Register an endpoint; 409 when the name is taken (use PUT to change one). 422 when the
    egress policy refuses its host or its ``api_key_env`` is outside the allowed prefix, or its
    ``tokenizer`` path is not under ``EVALSVC_TOKENIZER_ROOT`` (refused when that is unset)."""
    ref = registry.register_endpoint(  # Conflict → 409, UsageError → 422 (the app's handlers)
        store,
        name=body.name,
        url=body.url,
        model=body.model,
        api_key_env=body.api_key_env,
        tokenizer=body.tokenizer,
        policy=server_policy(),
    )
    return _read(ref)


@router.get("/{name}", response_model=EndpointRead, responses={404: {"model": Problem}})
def get_endpoint(name: PathKey, store: StoreDep, _: ReadScope) -> EndpointRead:
    ref = store.get_endpoint(name)
    if ref is None:
        raise _not_found(name)
    return _read(ref)


@router.put("/{name}", response_model=EndpointRead, responses={404: {"model": Problem}})
def update_endpoint(
    name: PathKey, body: EndpointUpdate, store: StoreDep, _: AdminScope
) -> EndpointRead:
    """Replace a registered endpoint's url, model, api_key_env and tokenizer; 404 when unknown."""
    try:
        ref = registry.update_endpoint(
            store,
            name=name,
            url=body.url,
            model=body.model,
            api_key_env=body.api_key_env,
            tokenizer=body.tokenizer,
            policy=server_policy(),
        )
    except registry.NotFound:
        raise _not_found(name) from None
    return _read(ref)


@router.delete(
    "/{name}", status_code=status.HTTP_204_NO_CONTENT, responses={404: {"model": Problem}}
)
def delete_endpoint(name: PathKey, store: StoreDep, _: AdminScope) -> Response:
    """Remove a registered endpoint (runs that used it keep their own copy of it)."""
    try:
        registry.remove_endpoint(store, name)
    except registry.NotFound:
        raise _not_found(name) from None
    return Response(status_code=status.HTTP_204_NO_CONTENT)
