"""``evalsvc schedules``: cron schedules that queue runs or sweeps (add, list, remove, run).

``add --sweep spec.yaml`` schedules a sweep (the YAML ``evalsvc sweep --spec`` reads), checked
as the workers check it (existing endpoints only unless ``EVALSVC_SWEEP_ALLOW_LAUNCH``).

Cron expressions are evaluated in UTC. Missed fire times (schedulers down) collapse into one
run for the latest of them ("catch-up: latest").
"""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from evalsvc.db import StoreError
from evalsvc.domain import EndpointRef, RunOptions, RunSpec
from evalsvc.endpoints import redact_urls_in

from ._dbcommon import (
    EXIT_CONFIG,
    DatabaseUrlOption,
    configure_logging,
    fail,
    fail_store,
    fmt_time,
    open_store,
    with_store,
)
from ._exit import exit_code
from ._safe import term

if TYPE_CHECKING:
    from evalsvc.db import Store

app = typer.Typer(name="schedules", help="Cron schedules that queue runs.", no_args_is_help=True)


def _endpoint(store: Store, value: str) -> EndpointRef:
    """A URL as given, or a registered endpoint name."""
    if "://" in value:
        return EndpointRef(url=value)
    endpoint = store.get_endpoint(value)
    if endpoint is None:
        fail(f"{value!r} is neither a URL nor a registered endpoint name", EXIT_CONFIG)
    return endpoint


def _template(
    store: Store,
    *,
    spec_path: Path | None,
    baseline: str | None,
    candidates: list[str],
    suites: list[str],
    samples: int | None,
    seed: int | None,
    priority: int,
    labels: list[str],
) -> RunSpec:
    try:
        if spec_path is not None:
            if baseline or candidates or suites:
                fail("give either --spec or --baseline/--candidate/--suite, not both", EXIT_CONFIG)
            from evalsvc.suites import read_yaml

            data: Any = read_yaml(spec_path)  # size cap, UTF-8, no aliases
            return RunSpec.model_validate(data)
        if not baseline or not candidates or not suites:
            fail(
                "need --baseline, at least one --candidate and at least one --suite "
                "(or --spec FILE)",
                EXIT_CONFIG,
            )
        label_map = {}
        for label in labels:
            key, sep, value = label.partition("=")
            if not sep:
                fail(f"--label must look like key=value, got {label!r}", EXIT_CONFIG)
            label_map[key] = value
        return RunSpec(
            baseline=_endpoint(store, baseline),
            candidates=[_endpoint(store, c) for c in candidates],
            suites=suites,
            options=RunOptions(samples=samples, seed=seed),
            labels=label_map,
            priority=priority,
        )
    except (OSError, ValueError) as err:  # SuiteError and ValidationError are ValueErrors
        fail(f"invalid run template: {err}", EXIT_CONFIG)


@app.command()
def add(
    name: Annotated[str, typer.Argument(help="Unique schedule name.")],
    cron: Annotated[str, typer.Option(help="Cron expression, UTC (e.g. '0 3 * * *').")],
    baseline: Annotated[str | None, typer.Option(help="Baseline URL or endpoint name.")] = None,
    candidate: Annotated[
        list[str] | None, typer.Option(help="Candidate URL or endpoint name (repeatable).")
    ] = None,
    suite: Annotated[
        list[str] | None, typer.Option(help="Suite name or path (repeatable).")
    ] = None,
    spec: Annotated[
        Path | None, typer.Option(help="A RunSpec as YAML/JSON instead of the flags above.")
    ] = None,
    samples: Annotated[int | None, typer.Option(help="Items per suite.")] = None,
    seed: Annotated[int | None, typer.Option()] = None,
    priority: Annotated[int, typer.Option(help="Higher runs are claimed first.")] = 0,
    label: Annotated[list[str] | None, typer.Option(help="key=value (repeatable).")] = None,
    sweep: Annotated[
        Path | None,
        typer.Option(help="A sweep spec (YAML, as `evalsvc sweep --spec`) to queue instead of "
                     "a run."),
    ] = None,
    database_url: DatabaseUrlOption = None,
) -> None:
    """Add a schedule that queues a run (or, with --sweep, a sweep) at every cron fire time."""
    # Imported here: the service layer brings the statistics (SciPy), which every other
    # command of the CLI would otherwise pay for at start-up.
    from evalsvc.services import registry

    store = open_store(database_url)
    try:
        if sweep is not None:
            if baseline or candidate or suite or spec:
                fail("give either --sweep or a run template, not both", EXIT_CONFIG)
            from evalsvc.services.sweeps import load_spec

            created = registry.add_sweep_schedule(
                store, name=name, cron=cron, spec=load_spec(sweep)
            )
            typer.echo(
                f"schedule {created['name']} ({created['id']}): next sweep at "
                f"{created['next_fire_time']:%Y-%m-%d %H:%M:%S} UTC"
            )
            return
        template = _template(
            store,
            spec_path=spec,
            baseline=baseline,
            candidates=candidate or [],
            suites=suite or [],
            samples=samples,
            seed=seed,
            priority=priority,
            labels=label or [],
        )
        # The same rules as POST /schedules: suites resolve (paths allowed here), the cron is
        # valid, the name is free, and workers will accept the template's endpoints.
        created = registry.add_schedule(
            store, name=name, cron=cron, template=template, allow_paths=True
        )
    except ValueError as err:  # UsageError, Conflict (both ValueErrors)
        fail(str(err), exit_code(err))
    except StoreError as err:
        fail_store(err)
    finally:
        store.close()
    typer.echo(
        f"schedule {created['name']} ({created['id']}): next run at "
        f"{created['next_fire_time']:%Y-%m-%d %H:%M:%S} UTC"
    )


@app.command("list")
def list_(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    database_url: DatabaseUrlOption = None,
) -> None:
    """List schedules."""
    store = open_store(database_url)
    try:
        schedules = store.list_schedules()
    except StoreError as err:
        fail_store(err)
    finally:
        store.close()
    if as_json:
        # Templates stored before the userinfo rule may hold credentials in their URLs.
        typer.echo(json.dumps(redact_urls_in(schedules), default=str, indent=2))
        return
    table = Table("name", "cron (UTC)", "next fire", "last fire", "suites", "id", "last error")
    for s in redact_urls_in(schedules):
        # Names, suites and errors are user- and endpoint-provided text: escaped for rich.
        table.add_row(
            term(s["name"] if s["enabled"] else f"{s['name']} (disabled)"),
            term(s["cron"]),
            fmt_time(s["next_fire_time"]),
            fmt_time(s["last_fire_time"]),
            term(("sweep: " if s.get("kind") == "sweep" else "")
                 + ", ".join(s["template"].get("suites", []))),
            term(s["id"]),
            term(f"{fmt_time(s['last_error_at'])} {s['last_error']}") if s.get("last_error") else "",
        )
    Console().print(table)


@app.command()
def remove(
    name_or_id: Annotated[str, typer.Argument(help="Schedule name or id.")],
    database_url: DatabaseUrlOption = None,
) -> None:
    """Remove a schedule (its past runs are kept)."""
    from evalsvc.services import registry

    try:
        with_store(database_url, lambda store: registry.remove_schedule(store, name_or_id))
    except registry.NotFound as err:
        fail(str(err), exit_code(err))
    typer.echo(f"removed schedule {name_or_id}")


@app.command()
def run(
    interval: Annotated[float, typer.Option(help="Seconds between checks.")] = 30.0,
    once: Annotated[bool, typer.Option("--once", help="Check once and exit.")] = False,
    database_url: DatabaseUrlOption = None,
) -> None:
    """Fire due schedules every INTERVAL seconds (several schedulers may run at once)."""
    from evalsvc.scheduler import Scheduler

    configure_logging()
    store = open_store(database_url)
    stop = threading.Event()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        created = Scheduler(store, interval_seconds=interval).run_forever(stop, once=once)
    except StoreError as err:
        fail_store(err)
    finally:
        store.close()
    if once:
        typer.echo(f"queued {created} run(s)")


if __name__ == "__main__":
    app()
