"""``evalsvc worker``: execute queued runs (and optionally fire cron schedules).

SIGTERM/SIGINT: stop claiming, let the executing runs finish their in-flight requests, release
their leases (back to the queue), exit 0. A run that does not stop within ``--shutdown-grace``
seconds (a suite still planning does not look at the cancel) is released as it is and the
worker exits 0 anyway. A second signal exits at once (the reaper re-queues the runs when their
leases expire).
"""

from __future__ import annotations

import logging
import os
import signal
from types import FrameType
from typing import Annotated

import typer

from evalsvc.db import StoreError

from ._dbcommon import DatabaseUrlOption, configure_logging, fail, fail_store, open_store
from ._exit import exit_code

log = logging.getLogger("evalsvc.worker")


def worker(
    concurrency: Annotated[
        int, typer.Option("--concurrency", "-c", min=1, help="Runs executed at once.")
    ] = 1,
    lease_seconds: Annotated[
        float | None,
        typer.Option(
            help="Lease length; heartbeats renew it every third of it. "
            "[default: $EVALSVC_LEASE_SECONDS or 60]",
            show_default=False,
        ),
    ] = None,
    poll: Annotated[float, typer.Option(help="Seconds between claims when idle.")] = 2.0,
    once: Annotated[
        bool, typer.Option("--once", help="Exit when nothing is left to claim.")
    ] = False,
    max_runs: Annotated[
        int | None, typer.Option(min=1, help="Exit after executing this many runs.")
    ] = None,
    schedules: Annotated[
        bool, typer.Option("--schedules", help="Also fire due cron schedules.")
    ] = False,
    schedule_interval: Annotated[
        float, typer.Option(help="Seconds between schedule checks (with --schedules).")
    ] = 30.0,
    shutdown_grace: Annotated[
        float,
        typer.Option(
            min=0.0, help="Seconds executing runs get to stop after SIGTERM before release."
        ),
    ] = 30.0,
    database_url: DatabaseUrlOption = None,
    executor: Annotated[
        str | None,
        typer.Option(hidden=True, help="Executor as module:function (tests, plugins)."),
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Claim queued runs from the database and execute them."""
    from evalsvc.scheduler import Scheduler, Worker, load_executor

    configure_logging(verbose)
    from evalsvc.settings import Settings

    settings = Settings()
    try:  # egress: a bad allowlist stops the worker at start, not at every run
        from evalsvc.endpoints import EgressPolicy

        EgressPolicy.from_settings(settings)
    except ValueError as err:
        fail(str(err), exit_code(err))
    try:
        if executor:
            run_executor = load_executor(executor)
        else:
            # Import the service layer now: a broken install must stop the worker at start,
            # not turn every claimed run into an error.
            import evalsvc.services.runs  # noqa: F401

            run_executor = None
    except (ImportError, AttributeError, ValueError) as err:
        fail(f"cannot load executor {executor or 'evalsvc.services.runs'!r}: {err}", 2)
    store = open_store(database_url)
    scheduler = Scheduler(store, interval_seconds=schedule_interval) if schedules else None
    runner = Worker(
        store,
        executor=run_executor,
        concurrency=concurrency,
        lease_seconds=lease_seconds or settings.lease_seconds,
        poll_seconds=poll,
        max_attempts=settings.max_attempts,
        scheduler=scheduler,
        shutdown_grace_seconds=shutdown_grace,
    )

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        if runner.stopping:
            log.warning("second signal: exiting now; leases expire and runs are re-queued")
            os._exit(128 + signum)
        log.info(
            "signal %s: finishing in-flight requests, releasing leases", signal.Signals(signum).name
        )
        runner.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        runner.run(once=once, max_runs=max_runs)
    except StoreError as err:
        fail_store(err)
    finally:
        store.close()


def main() -> None:
    typer.run(worker)


if __name__ == "__main__":
    main()
