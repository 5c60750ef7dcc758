"""``evalsvc sweep``: which serving configuration to ship, and how much capacity it buys at an SLO.

Contract: builds an ``evalsvc.services.sweeps.SweepSpec`` from ``--spec FILE`` (YAML) and/or
flags (flags win), runs it through ``evalsvc.services.sweeps.run_sweep``, prints the Markdown
report on stdout (progress on stderr) and writes ``--json`` / ``--markdown`` / ``--svg`` files. Exit status:
0 a configuration is recommended; 1 none passes every gate (or none could be measured);
2 bad input; 4 the baseline could not be started, the store is unusable, or the sweep was
interrupted (Ctrl-C, SIGTERM; what it launched is stopped first).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from evalsvc.cli._dbcommon import DatabaseUrlOption

err = Console(stderr=True)


def _split(text: str | None) -> list[str]:
    return [p.strip() for p in (text or "").split(",") if p.strip()]


def _config_flag(text: str) -> dict[str, Any]:
    """``NAME:key=value,key=value`` → a command configuration."""
    name, _, rest = text.partition(":")
    params = {}
    for pair in _split(rest):
        key, eq, value = pair.partition("=")
        if not eq:
            raise typer.BadParameter(f"--config {text!r}: expected NAME:key=value,...")
        params[key.strip()] = value.strip()
    return {"name": name.strip(), "kind": "command", "params": params}


def sweep(
    spec_file: Annotated[Path | None, typer.Option("--spec", help="YAML sweep spec.")] = None,
    baseline: Annotated[
        str | None, typer.Option(help="Baseline base URL, or 'local' (the embedded bf16 server).")
    ] = None,
    local_configs: Annotated[
        str | None,
        typer.Option("--local", help="Local configurations, comma-separated (fp8-kv,w8a8,w4a16)."),
    ] = None,
    endpoint: Annotated[
        list[str] | None, typer.Option(help="An existing endpoint NAME=URL (repeatable).")
    ] = None,
    command_template: Annotated[
        str | None,
        typer.Option(help="Command template for --config, e.g. 'vllm serve {model} "
                     "--kv-cache-dtype {kv_cache_dtype} --port {port}'."),
    ] = None,
    config: Annotated[
        list[str] | None,
        typer.Option(help="A launched configuration NAME:key=value,... (repeatable)."),
    ] = None,
    suite: Annotated[list[str] | None, typer.Option(help="Quality suite (repeatable).")] = None,
    samples: Annotated[int | None, typer.Option(min=1, help="Items per suite.")] = None,
    seed: Annotated[int | None, typer.Option(min=0)] = None,
    slo_ttft_ms: Annotated[float | None, typer.Option(help="TTFT objective (ms).")] = None,
    slo_tpot_ms: Annotated[float | None, typer.Option(help="TPOT objective (ms).")] = None,
    slo_attainment: Annotated[
        float | None, typer.Option(help="Share of requests that must meet the SLO (0-1].")
    ] = None,
    rates: Annotated[str | None, typer.Option(help="Offered rates, req/s, comma-separated.")] = None,
    start_rps: Annotated[float | None, typer.Option(help="First rate of the ladder.")] = None,
    growth: Annotated[float | None, typer.Option(help="Ladder factor between rates.")] = None,
    max_points: Annotated[int | None, typer.Option(help="Most rates per sweep.")] = None,
    requests: Annotated[int | None, typer.Option(help="Requests per rate.")] = None,
    blocks: Annotated[int | None, typer.Option(help="ABBA blocks of repetitions.")] = None,
    arrival: Annotated[str | None, typer.Option(help="poisson or gamma.")] = None,
    burstiness: Annotated[float | None, typer.Option(help="Gamma shape (1 = Poisson).")] = None,
    max_tokens: Annotated[int | None, typer.Option(help="Output tokens per request.")] = None,
    no_speed: Annotated[bool, typer.Option("--no-speed", help="Quality gates only.")] = False,
    health_timeout: Annotated[
        float | None, typer.Option(help="Seconds a launched server has to become healthy.")
    ] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the JSON here.")] = None,
    markdown_out: Annotated[
        Path | None, typer.Option("--markdown", help="Write the Markdown here.")
    ] = None,
    svg_out: Annotated[
        Path | None,
        typer.Option("--svg", help="Write the quality Δ vs capacity scatter (SVG) here."),
    ] = None,
    database_url: DatabaseUrlOption = None,
) -> None:
    """Gate and speed-measure a grid of serving configurations against one baseline."""
    import json

    from pydantic import ValidationError

    from evalsvc import local
    from evalsvc.db import Store, StoreError
    from evalsvc.services import sweeps
    from evalsvc.services.runs import UsageError

    def die(message: str, code: int) -> typer.Exit:
        err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True, markup=True)
        return typer.Exit(code)

    data: dict[str, Any] = {}
    if spec_file is not None:
        try:
            data = sweeps.load_spec(spec_file).model_dump(exclude_unset=True)
        except UsageError as exc:
            raise die(str(exc), 2) from exc
    configs = list(data.get("configs") or [])
    configs += [{"name": n, "kind": "local"} for n in _split(local_configs)]
    for e in endpoint or []:
        name, eq, url = e.partition("=")
        if not eq:
            raise die(f"--endpoint {e!r}: expected NAME=URL", 2)
        configs.append({"name": name.strip(), "kind": "existing", "url": url.strip()})
    configs += [_config_flag(c) for c in config or []]
    data["configs"] = configs
    for key, value in (("baseline", baseline), ("command_template", command_template),
                       ("samples", samples), ("seed", seed), ("health_timeout_s", health_timeout)):
        if value is not None:
            data[key] = value
    if suite:
        data["suites"] = list(suite)
    speed = dict(data.get("speed") or {})
    for key, value in (("slo_ttft_ms", slo_ttft_ms), ("slo_tpot_ms", slo_tpot_ms),
                       ("slo_attainment", slo_attainment), ("start_rps", start_rps),
                       ("growth", growth), ("max_points", max_points), ("requests", requests),
                       ("blocks", blocks), ("arrival", arrival), ("burstiness", burstiness),
                       ("max_tokens", max_tokens)):
        if value is not None:
            speed[key] = value
    if rates is not None:
        try:
            speed["rates"] = [float(r) for r in _split(rates)]
        except ValueError as exc:
            raise die(f"--rates {rates!r}: numbers separated by commas", 2) from exc
    if no_speed:
        speed["enabled"] = False
    data["speed"] = speed
    try:
        spec = sweeps.SweepSpec.model_validate(data)
    except ValidationError as exc:
        raise die(f"bad sweep: {exc}", 2) from exc
    try:
        store = Store.from_url(database_url)
        store.ensure_ready(upgrade_fresh_sqlite=True)
    except StoreError as exc:
        raise die(str(exc), 4) from exc

    try:
        report = sweeps.run_sweep(spec, store=store, log=lambda m: err.print(m, highlight=False,
                                                                              markup=False))
    except UsageError as exc:
        raise die(str(exc), 2) from exc
    except local.LocalError as exc:
        raise die(str(exc), exc.exit_code) from exc
    except KeyboardInterrupt as exc:
        raise die("sweep interrupted; everything it launched was stopped", 4) from exc
    text = sweeps.markdown(report)
    if json_out is not None:
        json_out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    if markdown_out is not None:
        markdown_out.write_text(text + "\n", encoding="utf-8")
    if svg_out is not None:
        from evalsvc.services.sweep_plot import scatter_svg

        svg_out.write_text(scatter_svg(report) + "\n", encoding="utf-8")
    typer.echo(text)
    raise typer.Exit(0 if report["recommendation"]["config"] else 1)
