"""The ``evalsvc`` command line (Typer): the application and where each command lives.

Contract (docs/cli.md): ``evalsvc compare`` exits 0 pass, 1 fail, 2 usage/config error,
3 inconclusive, 4 infrastructure error, 5 non-comparable. Human output goes to stderr; ``--json -`` alone owns
stdout. Commands parse arguments and call ``evalsvc.services``; one function maps an exception
to an exit code (``evalsvc.cli._exit.exit_code``). The commands live in their modules:
``compare`` (compare, gate-logs; ``rest`` is its REST client), ``suites`` (suites, plan),
``calibrate``, ``calibrations``,
``endpoints``, ``runs``, ``schedules``, ``tokens``, ``worker``, ``export``, ``db``, ``api``,
``local``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping
from typing import TYPE_CHECKING, Annotated, Any

import typer
import typer.main
from typer.core import TyperGroup

if TYPE_CHECKING:
    from typer import _click as click  # Typer's own copy of click

def _commands(parent: typer.Typer, name: str) -> None:
    """Register the command or sub-app ``name`` on ``parent``, importing only its module."""
    if name in ("compare", "gate-logs"):
        from evalsvc.cli import compare

        parent.command(name)(compare.compare if name == "compare" else compare.gate_logs)
    elif name == "plan":
        from evalsvc.cli import suites

        parent.command()(suites.plan)
    elif name == "calibrate":
        from evalsvc.cli.calibrate import calibrate

        parent.command("calibrate")(calibrate)
    elif name == "worker":
        from evalsvc.cli.worker import worker

        parent.command("worker")(worker)
    elif name == "export":
        from evalsvc.cli.export import export

        parent.command("export")(export)
    elif name == "sweep":
        from evalsvc.cli.sweep import sweep

        parent.command("sweep")(sweep)
    elif name == "suites":
        from evalsvc.cli import suites

        parent.add_typer(suites.app, name="suites")
    elif name == "endpoints":
        from evalsvc.cli import endpoints

        parent.add_typer(endpoints.app, name="endpoints")
    elif name == "local":
        from evalsvc.cli import local

        parent.add_typer(
            local.app,
            name="local",
            help="Real local endpoints, vLLM-CPU or llama.cpp (baseline + candidates).",
        )
    elif name == "db":
        from evalsvc.cli.db import app as db_app

        parent.add_typer(db_app, name="db", help="Database migrations.")
    elif name == "runs":
        from evalsvc.cli.runs import app as runs_app

        parent.add_typer(runs_app, name="runs", help="Stored runs: list, show, cancel, report, gate.")
    elif name == "schedules":
        from evalsvc.cli.schedules import app as schedules_app

        parent.add_typer(schedules_app, name="schedules", help="Cron schedules that create runs.")
    elif name == "api":
        from evalsvc.cli.api import app as api_app

        parent.add_typer(api_app, name="api", help="The REST API server.")
    elif name == "baselines":
        from evalsvc.cli.baselines import app as baselines_app

        parent.add_typer(
            baselines_app, name="baselines", help="Blessed baselines: bless, list, show, revoke."
        )
    elif name == "calibrations":
        from evalsvc.cli.calibrations import app as calibrations_app

        parent.add_typer(calibrations_app, name="calibrations",
                         help="Noise-floor calibrations: list, show, adopt.")
    elif name == "tokens":
        from evalsvc.cli.tokens import app as tokens_app

        parent.add_typer(tokens_app, name="tokens", help="Bearer tokens of the REST API.")
    elif name == "attest":
        from evalsvc.cli.attest import app as attest_app

        parent.add_typer(attest_app, name="attest")
    elif name == "alerts":
        from evalsvc.cli.alerts import app as alerts_app

        parent.add_typer(alerts_app, name="alerts", help="Alerts raised by finished runs: list, ack.")
    else:
        raise KeyError(name)


# The order of `evalsvc --help` (Typer lists commands before sub-apps).
COMMANDS = (
    "compare", "gate-logs", "plan", "calibrate", "worker", "export", "sweep",
    "suites", "endpoints", "local", "db", "runs", "schedules", "baselines", "calibrations", "api",
    "tokens", "alerts", "attest",
)


def _load(name: str) -> click.Command:
    # Typer converts the command exactly as it would on the root app: registered on a
    # throwaway app with a callback (so it stays a group and the command keeps its name).
    holder = typer.Typer()
    holder.callback()(_holder)
    _commands(holder, name)
    return typer.main.get_group(holder).commands[name]


def _holder() -> None:
    """Placeholder callback of the throwaway app in ``_load``."""


#: Each command's line in ``evalsvc --help``: the first paragraph of its own help, kept here so
#: that the root help lists every command without importing any command module (importing them
#: all, ``compare``'s pydantic models foremost, was most of ``--help``'s start-up:
#: docs/benchmarks.md, "CLI start-up"). tests/cli/test_startup.py checks each line against the
#: command's own help, so a changed docstring fails there, not silently here. A command missing
#: from this table is loaded for the help, as before.
SHORT_HELP: dict[str, str] = {
    "compare": "Compare CANDIDATE endpoints against BASELINE and gate them. Exit 0 pass, 1 fail, "
    "2 usage or configuration error, 3 inconclusive, 4 infrastructure error, 5 non-comparable.",
    "gate-logs": "Gate two existing evaluation logs, paired by document id.",
    "plan": "How many items each suite needs to decide at margin δ, before running it (for a "
    "suite that calibrates: its pilot's cost and the main run's size at the band).",
    "calibrate": "Run ENDPOINT against itself (A/A) and store its noise floor: per suite, the "
    "discordance and the batch instability that `plan` and the determinism gate use.",
    "worker": "Claim queued runs from the database and execute them.",
    "export": "Export every sample of a run, one row per (endpoint, suite, item, repeat).",
    "sweep": "Gate and speed-measure a grid of serving configurations against one baseline.",
    "suites": "The suite catalog.",
    "endpoints": "The endpoint registry (names usable in `compare`).",
    "local": "Real local endpoints, vLLM-CPU or llama.cpp (baseline + candidates).",
    "db": "Database migrations.",
    "runs": "Stored runs: list, show, cancel, report, gate.",
    "schedules": "Cron schedules that create runs.",
    "baselines": "Blessed baselines: bless, list, show, revoke.",
    "calibrations": "Noise-floor calibrations: list, show, adopt.",
    "api": "The REST API server.",
    "tokens": "Bearer tokens of the REST API.",
    "alerts": "Alerts raised by finished runs: list, ack.",
    "attest": "Signed verdicts: attest RUN, keygen, verify.",
}


def _listing(name: str) -> click.Command:
    """A stand-in for ``name`` that only the root help reads: its name and its line."""
    from typer.core import TyperCommand

    return TyperCommand(name, help=SHORT_HELP[name])


class _LazyCommands(MutableMapping[str, "click.Command"]):
    """The root group's commands, each module imported when its command is first looked up:
    ``evalsvc suites list`` imports the suite commands and nothing of ``compare``, ``runs``,
    ``local``...; ``--version`` none; the root ``--help`` none either while it lists them
    (``listing``: each command's line comes from ``SHORT_HELP``)."""

    def __init__(self, loaded: Mapping[str, click.Command]) -> None:
        self._loaded = dict(loaded)
        self._names = [*COMMANDS, *(n for n in loaded if n not in COMMANDS)]
        self.listing = False

    def __getitem__(self, name: str) -> click.Command:
        if name not in self._loaded:
            if name not in self._names:
                raise KeyError(name)
            if self.listing and name in SHORT_HELP:
                return _listing(name)
            self._loaded[name] = _load(name)
        return self._loaded[name]

    def __setitem__(self, name: str, command: click.Command) -> None:
        if name not in self._names:
            self._names.append(name)
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        self._names.remove(name)
        self._loaded.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._names))

    def __len__(self) -> int:
        return len(self._names)


class _LazyGroup(TyperGroup):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands = _LazyCommands(self.commands)

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        commands = self.commands
        assert isinstance(commands, _LazyCommands)
        commands.listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            commands.listing = False


app = typer.Typer(
    name="evalsvc",
    cls=_LazyGroup,
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


def main() -> None:
    app()


if __name__ == "__main__":
    main()
