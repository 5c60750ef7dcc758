"""The run service: the one code path behind ``evalsvc compare``, REST ``POST /runs`` and workers.

Contract:
- ``resolve_endpoint`` turns a URL or a registered name into an ``EndpointRef``.
- ``compare`` runs in-process: it records the run in the store, executes it, persists samples as
  they complete, the gates and the report, and returns the report dict.
- ``submit`` queues a run for workers (REST); ``execute_stored_run`` is what a worker calls for a
  claimed run, resuming at item level from the samples already stored.
- Errors surface as ``UsageError`` (exit 2), ``InfrastructureError`` (exit 4) or are recorded in
  the run. The verdict is always computed by ``evalsvc.runner`` and ``evalsvc.gates``.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import re
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from evalsvc import limits
from evalsvc.db import IN_PROCESS_PREFIX, Leases, SampleWriter, Store
from evalsvc.domain import (
    EXIT_CODES,
    EndpointRef,
    Provenance,
    RunInfo,
    RunSpec,
    RunStatus,
    Sample,
)
from evalsvc.endpoints import (
    EgressPolicy,
    EgressRefused,
    UrlError,
    check_endpoint_url,
    under_root,
)
from evalsvc.gates import GateLimits, GatePolicyError
from evalsvc.reports import basis_of, build_report
from evalsvc.runner import (
    CancelledRun,
    CapabilityError,
    InfrastructureError,
    Progress,
    execute,
)
from evalsvc.services import noise_floor
from evalsvc.services.identity import endpoint_identity
from evalsvc.settings import Settings
from evalsvc.suites import Suite, SuiteError, resolve


class UsageError(ValueError):
    """Bad input from the user: unknown suite, bad YAML, unknown endpoint name (exit 2)."""


def exit_code(verdict: str | None) -> int:
    """The CLI exit status for a run verdict (docs/cli.md: 0 pass, 1 fail, 3 inconclusive, 4 error,
    5 non-comparable)."""
    return EXIT_CODES.get(verdict or "error", EXIT_CODES["error"])


def resolve_endpoint(name_or_url: str, store: Store | None) -> EndpointRef:
    if "://" in name_or_url:
        try:
            return EndpointRef(url=check_endpoint_url(name_or_url))
        except UrlError as exc:
            raise UsageError(str(exc)) from None
    found = store.get_endpoint(name_or_url) if store is not None else None
    if found is None:
        hint = ""
        if re.fullmatch(r"[\w.\-\[\]:]+:\d{1,5}(/\S*)?", name_or_url):
            # host:port[/path] without its scheme, the most common way to get here (a bare
            # host:port also lacks the OpenAI base path, which vLLM and SGLang serve at /v1).
            path = "" if "/" in name_or_url else "/v1"
            hint = f" (did you mean http://{name_or_url}{path}?)"
        raise UsageError(
            f"{name_or_url!r} is neither a URL (http://host:port/v1) nor a registered endpoint "
            f"name{hint}"
        )
    try:  # egress: a registration older than the userinfo rule is refused, not used
        check_endpoint_url(found.url)
    except UrlError as exc:
        raise UsageError(f"registered endpoint {name_or_url!r}: {exc}") from None
    return found


def resolve_helpers(
    suites: Sequence[Suite], store: Store | None, *, server: bool
) -> dict[str, dict[str, EndpointRef]]:
    """The helper endpoints the suites name (``Suite.helper_endpoints``: a judge, an embedding
    model) as refs, ``{suite: {purpose: ref}}``: a registered name, or (not on a server, where
    every endpoint must be registered) a URL. An unknown one is a ``UsageError`` (exit 2)
    before anything is sent."""
    out: dict[str, dict[str, EndpointRef]] = {}
    for suite in suites:
        for purpose, name in suite.helper_endpoints().items():
            if server and "://" in name:
                raise UsageError(
                    f"suite {suite.name}: its {purpose} endpoint must be a registered endpoint "
                    f"name on a server, not a URL (register it: evalsvc endpoints add NAME URL)"
                )
            try:
                ref = resolve_endpoint(name, store)
            except UsageError as exc:
                raise UsageError(f"suite {suite.name}: {purpose} endpoint: {exc}") from None
            if model := suite.helper_models().get(purpose):
                ref = ref.model_copy(update={"model": model})
            out.setdefault(suite.name, {})[purpose] = ref
    return out


def gate_limits() -> GateLimits:
    """The server's bounds on every suite's gate policy (``EVALSVC_GATE_MAX_MARGIN``/``_ALPHA``)."""
    settings = Settings()
    return GateLimits(max_margin=settings.gate_max_margin, max_alpha=settings.gate_max_alpha)


def load_suites(spec: RunSpec, *, allow_paths: bool = True) -> list[Suite]:
    """Resolve the spec's suite names and apply ``--samples`` / ``--seed`` overrides.

    ``allow_paths=False`` (anything that came over HTTP) resolves catalog names only, never a
    file on this machine. Each suite's gate is resolved here too (``evalsvc.gates.resolve`` with the server's limits),
    so a gate option that loosens a suite's policy, or is out of range, is a usage error before
    any request is sent."""
    try:
        suites = resolve(spec.suites, allow_paths=allow_paths)
    except SuiteError as exc:
        raise UsageError(str(exc)) from exc
    opts = spec.options
    if opts.samples is not None or opts.seed is not None:
        try:
            suites = [s.with_overrides(samples=opts.samples, seed=opts.seed) for s in suites]
        except ValueError as exc:
            raise UsageError(f"--samples/--seed rejected: {exc}") from exc
    bind_gates(suites, opts)
    return suites


def bind_gates(suites: Sequence[Suite], options: Any) -> None:
    """Resolve every suite's gate once (``Suite.bind_gate``) within the server's limits: the one
    place where a gate is resolved; the runner, the snapshot and the report read ``suite.gate``.
    A refused option is a ``UsageError`` before any request is sent."""
    bounds = gate_limits()
    try:
        for suite in suites:
            suite.bind_gate(options, limits=bounds)
    except GatePolicyError as exc:
        raise UsageError(f"gate options refused: {exc}") from exc


def submit(
    spec: RunSpec, *, store: Store, submitted_by: str | None = None, admin: bool = False
) -> RunInfo:
    """Validate and queue a run for workers (REST ``POST /runs``, ``compare --server``);
    ``submitted_by`` is the caller's token name (who may cancel it besides admins); ``admin``
    whether the caller may set operator policy (``check_allowed_differences``)."""
    check_allowed_differences(spec.options, admin=admin)
    suites = load_suites(spec, allow_paths=False)  # unknown suites: at submission, not later
    check_server_items(spec, suites)
    resolve_helpers(suites, store, server=True)  # an unknown judge: at submission, not later
    check_server_spec(spec, store=store)
    return store.create_run(spec, status=RunStatus.queued, submitted_by=submitted_by)


def server_allowed_differences() -> list[str]:
    """The differences the operator lets any submitter allow (``EVALSVC_ALLOWED_DIFFERENCES``)."""
    return [n.strip() for n in Settings().allowed_differences.split(",") if n.strip()]


def check_allowed_differences(options: Any, *, admin: bool) -> None:
    """A difference a run allows (``options.comparability.allow``) turns ``non-comparable`` into
    a verdict, so it is the operator's policy (issue 47): a client of the server without the
    ``admin`` scope may allow only what ``EVALSVC_ALLOWED_DIFFERENCES`` names; anything else is
    a ``UsageError`` (422) naming the setting. Every submission path calls it (REST runs and
    calibrations; sweeps and schedules build their runs' options without one, and schedules
    are admin's). In-process ``compare --allow-difference`` is the operator's own: not here."""
    comparability = getattr(options, "comparability", None)
    asked = list(comparability.allow) if comparability is not None else []
    if admin or not asked:
        return
    allowed = server_allowed_differences()
    refused = [name for name in asked if name not in allowed]
    if refused:
        raise UsageError(
            f"options.comparability.allow {', '.join(refused)} refused: an allowed difference "
            "turns a non-comparable run into a verdict, so it is the operator's policy; this "
            "server lets a submit token allow "
            f"{', '.join(allowed) if allowed else 'none'} (EVALSVC_ALLOWED_DIFFERENCES). Ask an "
            "admin to submit the run, or to add the name to EVALSVC_ALLOWED_DIFFERENCES"
        )


def _sets_policy(store: Store, submitted_by: str | None) -> bool:
    """Whether a stored run's submitter may set operator policy (the worker's side of
    ``check_allowed_differences``): no submitter (a schedule, which only admins and the operator
    create), the API with authentication off (every caller has every scope), or a token that
    has the ``admin`` scope."""
    from evalsvc.services.tokens import ANONYMOUS

    if submitted_by is None or submitted_by == ANONYMOUS.name:
        return True
    return any(t.name == submitted_by and "admin" in t.scopes for t in store.list_api_tokens())


def _bounded_name(suite: Suite) -> str:
    k = suite.samples_per_item
    return suite.name if k == 1 else f"{suite.name} (items × {k} samples)"


def _bounded_count(suite: Suite) -> int | None:
    """What the server's item bound counts of a suite: its items, times its samples per item
    for a sampled suite (each is a request on every endpoint, docs/suites.md)."""
    n = suite.item_count()
    return None if n is None else n * suite.samples_per_item


def check_server_items(spec: RunSpec, suites: Sequence[Suite]) -> None:
    """``check_server_limits`` for a run (REST runs, schedules, ``compare --server``, and the
    worker before it executes a claimed run); an in-process ``compare`` is bounded by
    ``evalsvc.limits.MAX_ITEMS`` alone (the suites' own validation)."""
    check_server_limits(
        "a run",
        samples=spec.options.samples,
        suite_items={_bounded_name(suite): _bounded_count(suite) for suite in suites},
        suites=len(spec.suites),
        configurations=len(spec.candidates),
        durations=[("options.request_timeout_s", spec.options.request_timeout_s,
                    limits.MAX_REQUEST_TIMEOUT_S)],
        in_process="`evalsvc compare`",
    )


def check_server_limits(
    what: str,
    *,
    samples: int | None = None,
    samples_field: str = "options.samples",
    suite_items: Mapping[str, int | None] | None = None,
    suites: int = 0,
    configurations: int = 1,
    durations: Sequence[tuple[str, float, float]] = (),
    in_process: str = "`evalsvc compare`",
) -> None:
    """The one server-side bound on what a client may make the workers do, for every submission
    path (REST runs, schedules, sweeps, gate-logs uploads) and again by the worker before it
    executes a stored row (a row stored before a bound, or under a larger setting, is refused
    with the reason). ``UsageError`` (422 over REST, exit 2 on the CLI) names every value over
    its bound:

    - items per suite: ``samples`` (the items override, named ``samples_field``) and each suite's own
      planned count in ``suite_items`` (``None``: not known before planning) at most
      ``EVALSVC_MAX_ITEMS`` (``Settings.max_items``);
    - ``suites`` (suite names asked for) at most ``limits.MAX_SUITES``;
    - ``configurations`` (candidates of a run, configurations of a sweep, sides of an upload)
      at most ``limits.MAX_CANDIDATES``;
    - each ``(field, seconds, bound)`` of ``durations`` finite and within its bound.

    ``what`` names the submission ("a run", "a sweep"); ``in_process`` the command that runs a
    larger job on the caller's own machine (the fix the message names)."""
    bound = Settings().max_items
    over = [f"{samples_field} is {samples}"] if samples is not None and samples > bound else []
    over += [
        f"{name} plans {count}"
        for name, count in (suite_items or {}).items()
        if count is not None and count > bound
    ]
    if over:
        raise UsageError(
            f"too many items: {'; '.join(over)}; {what} submitted to the server may plan at most "
            f"{bound} items per suite (EVALSVC_MAX_ITEMS); run larger suites in-process "
            f"with {in_process}"
        )
    if suites > limits.MAX_SUITES:
        raise UsageError(f"too many suites: {suites}; {what} submitted to the server may ask for "
                         f"at most {limits.MAX_SUITES}")
    if configurations > limits.MAX_CANDIDATES:
        raise UsageError(f"too many configurations: {configurations}; {what} submitted to the "
                         f"server may have at most {limits.MAX_CANDIDATES}")
    for field, seconds, most in durations:
        if not (math.isfinite(seconds) and 0 < seconds <= most):
            raise UsageError(f"{field} is {seconds}; {what} submitted to the server may ask for "
                             f"more than 0 and at most {most:g} seconds")


# ---- egress and credentials (docs/security.md) --------------------------------------------


def server_policy() -> EgressPolicy:
    """The API server's and workers' egress policy; ``UsageError`` when its settings are bad."""
    try:
        return EgressPolicy.from_settings()
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def check_server_spec(
    spec: RunSpec, *, store: Store, policy: EgressPolicy | None = None, names: bool = True
) -> None:
    """Refuse (``UsageError``) a spec a server-mode process must not execute: URLs with
    userinfo or outside the egress policy, and credentials on anything but an endpoint an admin
    registered with that URL and that ``api_key_env`` (under the allowed prefix), and a
    ``tokenizer`` path on anything but an endpoint registered with it, or outside
    ``EVALSVC_TOKENIZER_ROOT`` (``check_tokenizer_path``).

    ``names`` (at submission): an endpoint's ``name`` that is a registered endpoint's name must
    come with that endpoint's URL, or a run testing one URL could pose as a registered endpoint
    in every view that shows names (runs list, reports, metrics). Workers skip it: a run queued
    before an admin moved a registration to another URL still runs what was submitted.

    Called at submission (REST runs and schedules) and again by the worker before it connects,
    so a run stored before these rules, or edited in the database, cannot exfiltrate a secret.
    """
    policy = policy or server_policy()
    problems = []
    roles = ["baseline", *(f"candidate {i + 1}" for i in range(len(spec.candidates)))]
    for role, ref in zip(roles, [spec.baseline, *spec.candidates], strict=True):
        try:
            check_endpoint_url(ref.url)
            policy.check_url(ref.url)
            if names and ref.name:
                _check_name_matches(ref, store)
            if ref.api_key_env is not None:
                _require_registered(
                    ref, store, "api_key_env", "credentials are only sent to endpoints"
                )
                policy.check_key_env(ref.api_key_env)
            if ref.tokenizer is not None:
                _require_registered(
                    ref, store, "tokenizer", "a tokenizer path is only read for endpoints"
                )
                check_tokenizer_path(ref.tokenizer)
        except (UrlError, EgressRefused) as exc:
            problems.append(f"{role}: {exc}")
    if problems:
        raise UsageError("; ".join(problems))


def _require_registered(ref: EndpointRef, store: Store, field: str, rule: str) -> None:
    """A server-side setting of ``ref`` (``api_key_env``, ``tokenizer``) is honoured only for an
    endpoint an admin registered with that URL and that value; ``EgressRefused`` otherwise."""
    value = getattr(ref, field)
    registered = store.get_endpoint(ref.name) if ref.name else None
    if registered is None or registered.url != ref.url or getattr(registered, field) != value:
        raise EgressRefused(
            f"{field} {value!r} on {ref.name or 'an inline endpoint'} is refused: {rule} an "
            f"admin registered (POST /endpoints) with that URL and {field}"
        )


def check_tokenizer_path(path: str) -> None:
    """Server mode's rule on a registered tokenizer path (docs/security.md): a path that came
    over HTTP is read on the server, so it must lie under ``EVALSVC_TOKENIZER_ROOT``, and
    without that setting none is accepted. ``EgressRefused`` with the reason."""
    root = Settings().tokenizer_root
    if not root:
        raise EgressRefused(
            "a tokenizer path is read on the server: refused in server mode unless "
            "EVALSVC_TOKENIZER_ROOT names the directory tokenizers may be read from"
        )
    if not under_root(path, root):
        raise EgressRefused(f"tokenizer {path!r} is not an absolute path under EVALSVC_TOKENIZER_ROOT")


def _check_name_matches(ref: EndpointRef, store: Store) -> None:
    registered = store.get_endpoint(ref.name) if ref.name else None
    if registered is not None and registered.url.rstrip("/") != ref.url.rstrip("/"):
        raise EgressRefused(
            f"name {ref.name!r} is a registered endpoint with another URL: give the name alone "
            "to test the registered endpoint, or another label for this URL"
        )


def compare(
    spec: RunSpec,
    *,
    store: Store,
    progress: Progress | None = None,
    reuse_baseline_from: str | None = None,
    egress: EgressPolicy | None = None,
    allow_paths: bool = True,
    on_created: Callable[[str], None] | None = None,
    resuming: RunInfo | None = None,
) -> dict[str, Any]:
    """Run ``spec`` in-process (``evalsvc compare``) and return the JSON report.

    ``resuming`` (a finished run whose spec is ``spec``; :func:`resume`): that run is taken
    back to ``running`` and executed again instead of a new one, skipping every item it
    stored without error.

    ``on_created(run_id)`` is called once the run is recorded: a caller that ends without a
    report (an error, Ctrl-C) still names the run in what it writes.

    ``egress`` and ``allow_paths=False`` (a sweep a worker executes: server mode) connect
    through the server's policy and resolve catalog suite names only.

    ``reuse_baseline_from`` (a run id, ``evalsvc sweep``): that run's error-free baseline samples
    are copied into this run first, so the runner skips those items on the baseline (as for a
    resumed run) and every candidate is gated against the very same baseline samples; the spec
    must plan the same items (same suites and seed).

    Raises ``UsageError`` before anything is recorded when the suites are invalid; raises
    ``InfrastructureError`` / ``CapabilityError`` after recording the run as ``error``.
    """
    suites = load_suites(spec, allow_paths=allow_paths)
    helpers = resolve_helpers(suites, store, server=egress is not None)
    # Runs left "running" by a compare that was killed (or by lost workers) are settled first.
    settings = Settings()
    with contextlib.suppress(Exception):
        store.reap_expired(max_attempts=settings.max_attempts)
    owner = f"{IN_PROCESS_PREFIX}{socket.gethostname()}:{os.getpid()}"
    lease = settings.lease_seconds
    if resuming is None:
        run = store.create_run(
            spec, status=RunStatus.running, lease_owner=owner, lease_seconds=lease
        )
    elif store.reopen_run(resuming.id, lease_owner=owner, lease_seconds=lease):
        run = store.get_run(resuming.id) or resuming
    else:
        raise UsageError(f"run {resuming.id} is queued or running: only a finished run resumes")
    # The lease is renewed like a worker's (``Leases``), so if this process is killed (SIGKILL,
    # OOM, power) the next reaper (a worker's, or the next compare's) marks the run ``error``
    # instead of leaving it "running" for ever. A refused renewal (the run was cancelled or
    # reaped) sets ``lost``, and the runner stops at its next sample, as a worker does. A
    # database outage never stops an in-process run by itself (no ``give_up_after``).
    lost = threading.Event()
    try:
        if on_created is not None:
            on_created(run.id)
        if reuse_baseline_from is not None:
            with SampleWriter(store, run.id) as writer:
                for sample in store.get_samples(reuse_baseline_from, endpoint="baseline"):
                    if sample.error is None:
                        writer.add(sample)
        with Leases(store, owner=owner, lease_seconds=lease) as leases:
            leases.hold(run.id, on_lost=lost.set)
            return _execute(
                store,
                run,
                suites,
                progress=_StoreProgress(store, run.id, also=progress,
                                        suites=[x.name for x in suites]),
                cancel=lost,
                worker_id=None,
                egress=egress,
                helpers=helpers,
            )
    except CancelledRun:
        raise InfrastructureError(
            f"run {run.id} was cancelled from outside (POST /runs/{{id}}/cancel) or its lease "
            "lapsed; the samples so far are kept"
        ) from None
    except BaseException as exc:
        # Whatever stopped the run before ``_execute`` recorded it — a Ctrl-C while the run was
        # being set up (its snapshots, a reused baseline), say — still leaves it ``error``, never
        # "running" (the report already says "recorded as error"). A run ``_execute`` settled is
        # terminal, and ``finish_run`` leaves a terminal run alone.
        with contextlib.suppress(Exception):
            store.finish_run(run.id, status=RunStatus.error, verdict="error",
                             error=f"{type(exc).__name__}: {exc}")
        raise
    finally:
        # Once the verdict (or the error) is stored: raise and deliver the alerts it calls for
        # (evalsvc.services.alerts; never raises, a run still running raises nothing).
        from evalsvc.services import alerts

        alerts.after_run(store, run.id)


def resume(
    run_id: str,
    *,
    store: Store,
    progress: Progress | None = None,
    on_created: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Resume a finished run in this process (``evalsvc runs resume``) and return its new
    report: the same spec, endpoints and suites, the same run id; every item stored without
    error is skipped (``Store.done_keys``), so what is sent again is what errored (a suite that
    ended in error, an errored request) or never ran (an interrupted run). The gates and the
    report are computed anew over all the run's samples.

    ``UsageError`` (exit 2) for a run that is queued or running (a worker's), or that gated
    uploaded logs (nothing to send again)."""
    run = store.get_run(run_id)
    if run is None:
        raise UsageError(f"no run {run_id}")
    if run.status in (RunStatus.queued, RunStatus.running):
        raise UsageError(
            f"run {run.id} is {run.status.value}: only a finished run resumes (a worker "
            "resumes a queued or running one by itself; cancel it first to resume it here)"
        )
    if run.spec.labels.get("source") == "gate-logs":
        raise UsageError(
            f"run {run.id} gated uploaded logs: it sent nothing, so nothing can be sent again; "
            "gate the logs again with `evalsvc gate-logs`"
        )
    return compare(run.spec, store=store, progress=progress, on_created=on_created,
                   resuming=run)


def requeue(store: Store, run: RunInfo) -> RunInfo:
    """Queue a finished run again for the workers (``POST /runs/{id}/resume``): the worker that
    claims it resumes it as :func:`resume` does in-process, under the server's policy, sending
    only what has no sample stored without error. ``history.RunNotFinished`` (409) while it is
    queued or running; ``UsageError`` (422) for a run that gated uploaded logs."""
    from evalsvc.services.history import RunNotFinished

    if run.spec.labels.get("source") == "gate-logs":
        raise UsageError(
            f"run {run.id} gated uploaded logs: it sent nothing, so nothing can be sent again"
        )
    if not store.requeue_run(run.id):
        current = store.get_run(run.id) or run
        raise RunNotFinished(
            f"run {run.id} is {current.status.value}: only a finished run resumes (a worker "
            "resumes a queued or running one by itself)"
        )
    return store.get_run(run.id) or run


def execute_stored_run(
    store: Store,
    run: RunInfo,
    *,
    cancel: threading.Event,
    worker_id: str,
    progress: Progress | None = None,
) -> None:
    """Execute a claimed run (worker path). Never raises for run-level failures: it records them.

    Server mode: the spec is re-checked (``check_server_spec``) and every connection goes
    through the server's ``EgressPolicy``, whatever was stored; so are its allowed differences
    (``check_allowed_differences``, by its submitter's scopes: a row stored under a larger
    ``EVALSVC_ALLOWED_DIFFERENCES``, or written into the database, is refused with the reason).
    """
    try:
        allows = run.spec.options.comparability
        if allows is not None and allows.allow:  # the token lookup only when something is allowed
            check_allowed_differences(run.spec.options,
                                      admin=_sets_policy(store, run.submitted_by))
        suites = load_suites(run.spec)
        check_server_items(run.spec, suites)
        policy = server_policy()
        check_server_spec(run.spec, store=store, policy=policy, names=False)
        helpers = resolve_helpers(suites, store, server=True)
    except UsageError as exc:
        store.finish_run(
            run.id, status=RunStatus.error, verdict="error", error=str(exc), worker_id=worker_id
        )
        return
    try:
        _execute(
            store,
            run,
            suites,
            progress=progress or _StoreProgress(store, run.id, suites=[x.name for x in suites]),
            cancel=cancel,
            worker_id=worker_id,
            egress=policy,
            helpers=helpers,
        )
    except (InfrastructureError, CapabilityError):
        pass  # already recorded by _execute
    except CancelledRun:
        pass  # the worker decides: release the lease (SIGTERM) or leave it cancelled


def _execute(
    store: Store,
    run: RunInfo,
    suites: list[Suite],
    *,
    progress: Progress | None,
    cancel: threading.Event | None,
    worker_id: str | None,
    egress: EgressPolicy | None = None,
    helpers: dict[str, dict[str, EndpointRef]] | None = None,
) -> dict[str, Any]:
    spec = run.spec
    for suite in suites:
        store.save_suite_snapshot(
            run.id,
            name=suite.name,
            kind=suite.kind,
            version=suite.version,
            # The spec plus how it was gated in this run (evalsvc.gates.ResolvedGate: who set
            # which margin and α), in the snapshot's existing JSON column.
            spec={
                **suite.spec.model_dump(mode="json"),
                "resolved_gate": suite.gate.to_dict(),
                **suite.snapshot_extra(),
            },
        )
    writer = SampleWriter(store, run.id)
    done = store.done_keys(run.id)

    sink = writer.put

    async def stored() -> list[Sample]:
        return await asyncio.to_thread(store.get_samples, run.id)

    async def stored_pages(suite: str) -> AsyncIterator[list[Sample]]:
        # One suite's stored samples in pages of _PAGE: a resumed run of 100k items, or a
        # gate over them, never holds the run's samples at once.
        await writer.flushed(_nothing)()
        after = 0
        while True:
            page, after = await asyncio.to_thread(
                store.sample_page, run.id, suite=suite, after=after, limit=_PAGE
            )
            if not page:
                return
            yield page

    from evalsvc.services.baselines import Reuse

    reuse = Reuse(store, run, suites)

    def on_probed(role: str, ref: EndpointRef, prov: Provenance) -> None:
        # What is reused (blessings, noise floors) is bound to this identity, not to the facts
        # the server reports about itself (evalsvc.services.identity).
        identity = endpoint_identity(store, ref)
        store.save_endpoint_snapshot(run.id, role=role, endpoint=ref, provenance=prov,
                                     identity=identity)
        if role == "baseline":  # a blessed baseline's samples, before any item is sent
            reuse.apply(ref, prov, done, endpoint=identity)
        if role == "baseline":  # its adopted noise floor on this endpoint, if one is on file
            noise_floor.attach_floors(store, suites, prov, endpoint=identity)

    try:
        result = asyncio.run(
            execute(
                run_id=run.id,
                baseline=spec.baseline,
                candidates=spec.candidates,
                suites=suites,
                options=spec.options,
                sink=sink,
                done=done,
                stored=writer.flushed(stored),
                stored_pages=stored_pages,
                progress=progress,
                cancel=cancel,
                on_probed=on_probed,
                egress=egress,
                helpers=helpers,
                resink=writer.put_replacing,
            )
        )
    except (InfrastructureError, CapabilityError) as exc:
        writer.flush()
        store.finish_run(
            run.id, status=RunStatus.error, verdict="error", error=str(exc), worker_id=worker_id
        )
        raise
    except CancelledRun:
        writer.flush()
        raise
    except BaseException as exc:
        writer.flush()
        store.finish_run(
            run.id,
            status=RunStatus.error,
            verdict="error",
            error=f"{type(exc).__name__}: {exc}",
            worker_id=worker_id,
        )
        raise
    writer.flush()
    report = reuse.annotate(build_report(result))
    # What the verdict rests on (docs/report.md, Basis): after the reuse entries it reads.
    report["basis"] = basis_of(report)
    store.save_gate_results(
        run.id,
        [
            # The suite row has its own "candidate" (the metric value): keep it, but key by role.
            {**s, "candidate_value": s["candidate"], "candidate": c["role"], "candidate_url": c["url"]}
            for c in report["candidates"]
            for s in c["suites"]
        ],
    )
    store.save_report(run.id, report)
    store.finish_run(
        run.id,
        status=RunStatus.completed,
        verdict=result.verdict,
        error=result.error,
        worker_id=worker_id,
    )
    return report


#: Samples per page when a run reads its stored samples back (``Store.sample_page``).
_PAGE = 2000


async def _nothing() -> None:
    return None


#: How often (s) an in-process run's progress counts are written to its row at most.
_PROGRESS_EVERY_S = 0.5


class _StoreProgress:
    """Progress reporter: counts per (suite, role) written to the run's progress JSON, which
    ``GET /runs/{id}``, ``evalsvc runs show`` and the dashboard's live page read; ``also`` (the
    CLI's progress bars) sees every event too, so in-process runs are followed like queued ones."""

    def __init__(
        self, store: Store, run_id: str, also: Progress | None = None,
        suites: list[str] | None = None,
    ) -> None:
        self.store, self.run_id, self.also = store, run_id, also
        self.counts: dict[str, dict[str, int]] = {}
        self.totals: dict[str, int] = {}
        # Every suite of the run in execution order, before any is planned: the views say
        # "suite 2 of 5" instead of a share of the suites planned so far.
        self.suites = list(suites or [])
        self._last = 0.0
        announce = getattr(also, "suites", None)
        if callable(announce) and self.suites:
            announce(self.suites)

    def planned(self, suite: str, roles: Any, n_items: int, n_done: dict[str, int]) -> None:
        if self.also is not None:
            self.also.planned(suite, roles, n_items, n_done)
        self.totals[suite] = n_items
        self.counts[suite] = dict(n_done)
        self._push()

    def advance(self, suite: str, role: str, error: bool = False) -> None:
        if self.also is not None:
            self.also.advance(suite, role, error=error)
        self.counts.setdefault(suite, {}).setdefault(role, 0)
        self.counts[suite][role] += 1
        # At most every _PROGRESS_EVERY_S, and whenever an endpoint finishes a suite, so the
        # stored counts end at the planned totals. (Every 16 samples was one synchronous
        # commit per 16 responses on the event loop: the store, not the endpoint, set the
        # pace on a fast endpoint.)
        planned = self.totals.get(suite)
        now = time.monotonic()
        if now - self._last >= _PROGRESS_EVERY_S or (
            planned is not None and self.counts[suite][role] >= planned
        ):
            self._push()

    def message(self, text: str) -> None:
        if self.also is not None:
            self.also.message(text)

    def _push(self) -> None:
        self._last = time.monotonic()
        # Progress is advisory: never fail a run over it.
        with contextlib.suppress(Exception):
            self.store.update_progress(
                self.run_id, {"suites": self.suites, "items": self.totals, "done": self.counts}
            )
