"""The ``evalsvc`` command line (Typer): the application and where each command lives.

Contract (docs/cli.md): ``evalsvc compare`` exits 0 pass, 1 fail, 2 usage/config error,
3 inconclusive, 4 infrastructure error. Human output goes to stderr; ``--json -`` alone owns
stdout. Commands parse arguments and call ``evalsvc.services``; one function maps an exception
to an exit code (``evalsvc.cli._exit.exit_code``). The commands live in their modules:
``compare`` (compare, gate-logs; ``rest`` is its REST client), ``suites`` (suites, plan),
``endpoints``, ``runs``, ``schedules``, ``tokens``, ``worker``, ``export``, ``db``, ``api``,
``local``.
"""

from __future__ import annotations

from typing import Annotated

import typer

app = typer.Typer(
    name="evalsvc",
    help="Quality evaluation and release gates for quantized LLM serving endpoints.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        from evalsvc import __version__

        typer.echo(f"evalsvc {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """Quality evaluation and release gates for quantized LLM serving endpoints."""


def _mount() -> None:
    """Mount the commands and sub-apps that live in their own modules."""
    from evalsvc.cli import compare, endpoints, local, suites
    from evalsvc.cli.api import app as api_app
    from evalsvc.cli.db import app as db_app
    from evalsvc.cli.export import export
    from evalsvc.cli.runs import app as runs_app
    from evalsvc.cli.schedules import app as schedules_app
    from evalsvc.cli.sweep import sweep
    from evalsvc.cli.tokens import app as tokens_app
    from evalsvc.cli.worker import worker

    app.add_typer(suites.app, name="suites")
    app.add_typer(endpoints.app, name="endpoints")
    app.command()(compare.compare)
    app.command("gate-logs")(compare.gate_logs)
    app.command()(suites.plan)
    app.add_typer(
        local.app,
        name="local",
        help="Real local endpoints, vLLM-CPU or llama.cpp (baseline + candidates).",
    )
    app.add_typer(db_app, name="db", help="Database migrations.")
    app.add_typer(runs_app, name="runs", help="Stored runs: list, show, cancel, report, gate.")
    app.add_typer(schedules_app, name="schedules", help="Cron schedules that create runs.")
    app.add_typer(api_app, name="api", help="The REST API server.")
    app.add_typer(tokens_app, name="tokens", help="Bearer tokens of the REST API.")
    app.command("worker")(worker)
    app.command("export")(export)
    app.command("sweep")(sweep)


_mount()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
