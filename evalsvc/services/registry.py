"""Registered endpoints and schedules: one set of rules for the CLI and the REST API.

Contract: every write to the endpoint registry or the schedules goes through these functions,
so ``evalsvc endpoints add`` / ``evalsvc schedules add`` and ``POST /endpoints`` /
``POST /schedules`` validate the same things and fail the same way:

- :class:`~evalsvc.services.runs.UsageError` (exit 2 / HTTP 422): a bad name, URL, model or key
  name, an invalid cron, an unknown suite or endpoint, a template the workers would refuse;
- :class:`~evalsvc.db.Conflict` (exit 2 / HTTP 409): the name is taken (unless ``replace``);
- :class:`NotFound` (exit 2 / HTTP 404): no such endpoint or schedule.

The one deliberate difference is the egress policy (docs/security.md): the REST API passes the
server policy, so a remote admin cannot register an internal address, nor a ``tokenizer`` path
outside ``EVALSVC_TOKENIZER_ROOT`` (none at all without it: the path is read on the server); the
CLI, run by an operator on the machine itself, passes none (a local `compare` may call loopback,
and the tokenizer it names is loaded at once so that a bad path fails now), and the workers
check every URL and tokenizer path again before they connect.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from evalsvc import limits
from evalsvc.db import Conflict, Store
from evalsvc.domain import EndpointRef, RunSpec
from evalsvc.endpoints import (
    EgressPolicy,
    EgressRefused,
    LocalTokenizer,
    UrlError,
    check_endpoint_url,
)
from evalsvc.services import sweeps
from evalsvc.services.runs import (
    UsageError,
    check_server_items,
    check_server_spec,
    check_tokenizer_path,
    load_suites,
)
from evalsvc.services.sweeps import SweepSpec

#: Names of endpoints and schedules: a name must never look like a URL (``compare`` tells them
#: apart by ``://``), and it is used in URLs (``/endpoints/{name}``), so it is a slug.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
_NAME = re.compile(NAME_PATTERN)


class NotFound(LookupError):
    """No endpoint or schedule has this name."""


def _check_name(what: str, name: str) -> None:
    if not _NAME.fullmatch(name):
        raise UsageError(
            f"invalid {what} name {name!r}: use letters, digits, '.', '_' and '-' (at most "
            f"{limits.MAX_NAME} characters, starting with a letter or digit)"
        )


def _check_text(field: str, value: str | None, max_length: int) -> None:
    if value is None:
        return
    if len(value) > max_length:
        raise UsageError(f"{field} is longer than {max_length} characters")
    if "\x00" in value:
        raise UsageError(f"{field} contains a NUL character")


def check_endpoint(
    *,
    url: str,
    model: str | None,
    api_key_env: str | None,
    policy: EgressPolicy | None,
    tokenizer: str | None = None,
) -> str:
    """The normalised URL of a valid registration; raises ``UsageError`` with the reason."""
    _check_text("url", url, limits.MAX_URL)
    _check_text("model", model, limits.MAX_MODEL)
    _check_text("api_key_env", api_key_env, limits.MAX_ENV_NAME)
    _check_text("tokenizer", tokenizer, limits.MAX_PATH)
    if tokenizer is not None:
        _check_tokenizer(tokenizer, server=policy is not None)
    try:
        url = check_endpoint_url(url.strip())
    except UrlError as exc:
        raise UsageError(str(exc)) from None
    if policy is not None:
        try:
            policy.check_url(url)
            policy.check_key_env(api_key_env)
        except EgressRefused as exc:
            raise UsageError(str(exc)) from None
    return url.rstrip("/")


def _check_tokenizer(path: str, *, server: bool) -> None:
    if server:  # the path is read on the server: only under its configured root
        try:
            check_tokenizer_path(path)
        except EgressRefused as exc:
            raise UsageError(str(exc)) from None
        return
    try:  # the operator's own machine: load it now, so that a bad path fails here
        LocalTokenizer(path, source="--tokenizer")
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def register_endpoint(
    store: Store,
    *,
    name: str,
    url: str,
    model: str | None = None,
    api_key_env: str | None = None,
    tokenizer: str | None = None,
    replace: bool = False,
    policy: EgressPolicy | None = None,
) -> EndpointRef:
    """Register ``name``. A taken name is a :class:`Conflict` unless ``replace`` (which then
    replaces url, model, api_key_env and tokenizer, all of them: an omitted key is dropped on
    purpose)."""
    _check_name("endpoint", name)
    url = check_endpoint(
        url=url, model=model, api_key_env=api_key_env, policy=policy, tokenizer=tokenizer
    )
    fields = {"model": model, "api_key_env": api_key_env, "tokenizer": tokenizer}
    if replace:
        return store.upsert_endpoint(name=name, url=url, **fields)
    return store.create_endpoint(name=name, url=url, **fields)


def update_endpoint(
    store: Store,
    *,
    name: str,
    url: str,
    model: str | None = None,
    api_key_env: str | None = None,
    tokenizer: str | None = None,
    policy: EgressPolicy | None = None,
) -> EndpointRef:
    """Replace an existing registration (REST ``PUT``); :class:`NotFound` when there is none."""
    if store.get_endpoint(name) is None:
        raise NotFound(f"no endpoint named {name!r}")
    url = check_endpoint(
        url=url, model=model, api_key_env=api_key_env, policy=policy, tokenizer=tokenizer
    )
    return store.upsert_endpoint(
        name=name, url=url, model=model, api_key_env=api_key_env, tokenizer=tokenizer
    )


def remove_endpoint(store: Store, name: str) -> None:
    if not store.delete_endpoint(name):
        raise NotFound(f"no endpoint named {name!r}")


def add_schedule(
    store: Store,
    *,
    name: str,
    cron: str,
    template: RunSpec,
    start_at: datetime | None = None,
    allow_paths: bool = False,
) -> dict[str, Any]:
    """Create a schedule whose runs workers will accept: its suites resolve, its gate options
    are within policy, and its endpoints pass the server-mode checks the workers apply
    (egress, credentials), all checked now rather than at every fire time."""
    _check_name("schedule", name)
    _check_text("cron", cron, limits.MAX_CRON)
    # UsageError: unknown suite, bad gate option, more items than a server run may plan
    check_server_items(template, load_suites(template, allow_paths=allow_paths))
    check_server_spec(template, store=store)  # UsageError: what workers would refuse
    try:
        return store.add_schedule(name=name, cron=cron, template=template, start_at=start_at)
    except Conflict:
        raise
    except ValueError as exc:  # croniter's message for an invalid expression
        raise UsageError(f"invalid cron {cron!r}: {exc}") from exc


def add_sweep_schedule(
    store: Store,
    *,
    name: str,
    cron: str,
    spec: SweepSpec,
    start_at: datetime | None = None,
) -> dict[str, Any]:
    """Create a schedule that queues ``spec`` (a sweep) at every fire time; the sweep is checked
    now the way workers check it (``sweeps.check_server_sweep``: existing endpoints only unless
    the setting allows launching, catalog suites, the egress policy)."""
    _check_name("schedule", name)
    _check_text("cron", cron, limits.MAX_CRON)
    sweeps.submit_check(spec, store=store)
    try:
        return store.add_schedule(name=name, cron=cron, sweep=spec.model_dump(mode="json"),
                                  start_at=start_at)
    except Conflict:
        raise
    except ValueError as exc:
        raise UsageError(f"invalid cron {cron!r}: {exc}") from exc


def remove_schedule(store: Store, name_or_id: str) -> None:
    if not store.remove_schedule(name_or_id):
        raise NotFound(f"no schedule {name_or_id!r}")
