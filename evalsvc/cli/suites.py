"""The suite catalog commands: ``evalsvc suites list``, ``evalsvc suites show``, ``evalsvc
suites from-requests`` and ``evalsvc plan`` (how many items a suite needs, before running it).

Contract (docs/cli.md): ``--json`` prints to stdout alone; a broken catalog entry, an unknown
suite or a bad option is a usage error (exit 2, ``_exit.exit_code``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from evalsvc.cli._safe import term

from ._common import die, err, exit_for, open_store

app = typer.Typer(help="The suite catalog.", no_args_is_help=True)


@app.command("list")
def suites_list(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List the suite catalog: name, kind, gate, cost (items, pilot), needs, description."""
    # The rows come from a cache of the last listing while the catalog, the kinds and the
    # settings are unchanged, so a listing imports no kind (evalsvc.services.catalog_cache).
    from evalsvc.services.catalog_cache import listing

    try:
        rows, broken = listing()
    except ValueError as exc:
        from evalsvc.suites import SuiteError

        if not isinstance(exc, SuiteError):
            raise
        raise exit_for(exc) from exc
    if as_json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return
    table = Table(title="evalsvc suites (`evalsvc suites show NAME` for one in full)")
    for col in ("name", "kind", "gate", "cost", "needs", "description"):
        table.add_column(col, overflow="fold")
    for r in rows:
        members = r.get("suites")
        desc = _gist(str(r["description"] or "")) + (
            f" ({', '.join(members)})" if members else "")
        table.add_row(term(r["name"]), term(r["kind"]), term(r.get("gate") or ""),
                      term((r.get("cost") or {}).get("text", "")),
                      term(", ".join(r.get("needs") or [])), term(desc))
    Console().print(table)
    for name, reason in sorted(broken.items()):
        err.print(f"warning: suite kind plugin {name!r} not loaded: {reason}", markup=False)


def _gist(text: str, limit: int = 72) -> str:
    """A description's first sentence, cut at a word before ``limit`` characters with "…": the
    listing stays a few lines a suite (whole descriptions made it 1,000 lines at 100 columns);
    ``suites show`` and ``--json`` give them whole."""
    first = text.split(". ", 1)[0].strip()
    if len(first) <= limit:
        return first if first == text.strip() or first.endswith(".") else f"{first} …"
    return first[:limit].rsplit(" ", 1)[0].rstrip(",;:-( ") + " …"


@app.command("show")
def suites_show(
    name: Annotated[str, typer.Argument(
        help="A catalog suite or set name, or a suite file (as compare and plan take).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Show one suite (catalog or file) or set: its YAML, its gate (with the rationale) and
    plan's sizing."""
    from evalsvc.services.catalog import suite_detail
    from evalsvc.services.runs import UsageError
    from evalsvc.suites import SuiteError

    try:
        detail = suite_detail(name, allow_paths=True)  # the local user's own files
    except (SuiteError, UsageError) as exc:
        raise exit_for(exc) from exc
    if as_json:
        sys.stdout.write(json.dumps(detail, indent=2) + "\n")
        return
    out = Console(highlight=False)
    row = detail["row"]
    # soft_wrap: the header stays one line (a long path folded at a narrow terminal broke it).
    shown = row.get("name") or name  # a file's suite by the name inside it
    out.print(f"[bold]{term(shown)}[/] ({term(row['kind'])}) · {term(detail['path'])}",
              soft_wrap=True)
    # The file as written (escaped for the terminal), never wrapped at the terminal's width:
    # a wrapped line of a folded scalar would no longer be YAML, and users copy it.
    out.print(term(detail["yaml"].rstrip()), soft_wrap=True)
    out.print()
    out.print(f"needs: {term(', '.join(row.get('needs') or []) or 'nothing beyond the API')}")
    out.print(f"cost: {term(row['cost']['text'])} per endpoint")
    gates = Table(title="gate (evalsvc.gates; --margin/--alpha tighten it)")
    for col in ("suite", "gate", "α", "why"):
        gates.add_column(col, overflow="fold")
    for suite in detail["suites"]:
        g = detail["gates"][suite["name"]]
        why = g.get("rationale") or ""
        gates.add_row(term(suite["name"]), term(suite["gate"]), f"{g.get('alpha')}", term(why))
    out.print(gates)
    sizing = Table(title="sizing (`evalsvc plan`: items for 80% power at the margin)")
    for col in ("suite", "cost", "required", "planned", "note"):
        sizing.add_column(col, overflow="fold")
    costs = {s["name"]: s["cost"]["text"] for s in detail["suites"]}
    for r in detail["plan"]:
        sizing.add_row(term(r["suite"]), term(costs.get(r["suite"], "")),
                       str(r.get("required_items", "")), str(r.get("planned_items", "")),
                       term(r.get("note", "")))
    out.print(sizing)


@app.command("from-requests")
def suites_from_requests(
    log: Annotated[Path, typer.Argument(help="JSON Lines of chat-completions request bodies.")],
    out: Annotated[Path, typer.Option("--output", "-o", help="The suite YAML to write.")],
    n: Annotated[
        int | None, typer.Option("-n", "--samples", help="Conversations to sample (default 200).")
    ] = 200,
    seed: Annotated[int, typer.Option(min=0, help="Seed of the sample.")] = 0,
    name: Annotated[str | None, typer.Option(help="Suite name (default: the file's stem).")] = None,
    max_tokens: Annotated[
        int, typer.Option(help="Cap on each replayed request's max_tokens.")
    ] = 256,
    scorer: Annotated[
        str, typer.Option(help="How answers are compared: exact, normalized, numeric, choice.")
    ] = "exact",
    judge: Annotated[
        str | None,
        typer.Option(help="A registered endpoint that judges whether changed answers are as good "
                          "(pairwise, both orders): a model stronger than the ones under test."),
    ] = None,
    similarity: Annotated[
        str, typer.Option(help="With --compare similarity: the measure gated (rouge_l, token_f1).")
    ] = "rouge_l",
    compare: Annotated[
        str | None,
        typer.Option(help="What is gated: quality (default: degeneration, and meaning by the "
                          "judge or identical answers), judge, similarity (wording) or "
                          "agreement (exact)."),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite existing files.")] = False,
    skip_bad_lines: Annotated[bool, typer.Option(
        "--skip-bad-lines", help="Skip lines that are not a JSON object (counted, their numbers "
        "listed) instead of refusing the log.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Turn a log of OpenAI chat requests into a replay suite, gated on quality, not wording:
    degenerate answers against the baseline's, and (with --judge) the judge's verdicts."""
    from evalsvc.services.replay import suite_from_requests
    from evalsvc.services.runs import UsageError

    try:
        summary = suite_from_requests(
            log, out, n=n, seed=seed, name=name, max_tokens=max_tokens, scorer=scorer,
            force=force, judge=judge, similarity=similarity, compare=compare,
            skip_bad=skip_bad_lines,
        )
    except UsageError as exc:
        raise exit_for(exc) from exc
    if as_json:
        sys.stdout.write(json.dumps(summary.to_dict(), indent=2) + "\n")
        return
    err.print(
        f"wrote {summary.suite} and {summary.data}: {summary.written} of {summary.unique} "
        f"distinct conversations ({summary.requests} requests)",
        highlight=False,
    )
    for why, count in summary.skipped.items():
        lines = (f" (lines {', '.join(map(str, summary.bad_lines))}"
                 f"{', ...' if count > len(summary.bad_lines) else ''})"
                 if why.startswith("unreadable line") and summary.bad_lines else "")
        err.print(f"  skipped {count}: {why}{lines}", highlight=False)
    for what, count in summary.changed_prompts.items():
        err.print(f"  changed prompts: {count} requests offered {what}; they are replayed "
                  f"without {'them' if what == 'tools' else 'it'}, so the model sees another "
                  "prompt than in production"
                  + (" (gate tool use with a toolcalls suite)" if what == "tools" else ""),
                  highlight=False)
    if summary.dropped_fields:
        fields = ", ".join(f"{k} ({v})" for k, v in summary.dropped_fields.items())
        err.print(f"  dropped fields: {fields}", highlight=False)
    err.print(f"  {summary.gates} Changed answers and similarity are reported.", highlight=False)
    err.print(f"run it: evalsvc compare BASELINE CANDIDATE --suite {summary.suite}", highlight=False)


def plan(
    suite: Annotated[
        list[str], typer.Option("--suite", "-s", help="Suite name, set or YAML path (repeatable).")
    ],
    margin: Annotated[
        float | None, typer.Option(min=0.0, help="Margin δ (default: the suite's).")
    ] = None,
    alpha: Annotated[float | None, typer.Option(min=0.0, max=0.5)] = None,
    power: Annotated[float, typer.Option(min=0.5, max=0.99)] = 0.8,
    discordance: Annotated[
        float | None, typer.Option(min=0.0, max=1.0, help="Expected share of items that flip.")
    ] = None,
    pilot_run: Annotated[
        str | None, typer.Option(help="Take the discordance from this stored run's report.")
    ] = None,
    calibrate: Annotated[
        bool | None,
        typer.Option(
            "--calibrate/--no-calibrate",
            help="Plan as compare --calibrate would run (default: each suite's `calibrate:`).",
        ),
    ] = None,
    max_context: Annotated[
        int | None,
        typer.Option(
            min=1, help="The baseline's max context, for ladders that rise to it (needle)."
        ),
    ] = None,
    endpoint: Annotated[
        str | None,
        typer.Option(
            help="Size with this endpoint's calibrated discordance (evalsvc calibrate): an "
            "adopted calibration of this endpoint and its provenance fingerprint (probes it)."
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    db: Annotated[
        str | None, typer.Option("--database-url", help="SQLAlchemy URL of the database.")
    ] = None,
) -> None:
    """How many items each suite needs to decide at margin δ, before running it (for a suite
    that calibrates: its pilot's cost and the main run's size at the band)."""
    from evalsvc.services import planning
    from evalsvc.services.runs import UsageError

    store = open_store(db) if pilot_run or endpoint else None
    floors = None
    if endpoint is not None:
        from evalsvc.endpoints import EndpointError
        from evalsvc.services import calibration
        from evalsvc.services.runs import resolve_endpoint

        assert store is not None  # opened above for --endpoint
        try:
            ref = resolve_endpoint(endpoint, store)
            _, floors = calibration.floors_for_endpoint(store, ref, suite)
        except (UsageError, LookupError) as exc:
            raise exit_for(exc) from exc
        except (EndpointError, OSError) as exc:
            raise die(f"endpoint {endpoint} unreachable: {exc}", 4) from exc
    try:
        rows = planning.plan(
            suites=suite,
            margin=margin,
            alpha=alpha,
            power=power,
            discordance=discordance,
            pilot_run=pilot_run,
            store=store,
            calibrate=calibrate,
            max_context=max_context,
            floors=floors,
        )
    except UsageError as exc:
        raise exit_for(exc) from exc
    if as_json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return
    table = Table(title=f"items needed (power {power})")
    for col in ("suite", "margin", "discordance", "required", "planned", "MDE at planned", "note"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(
            term(r["suite"]),
            "—" if r["margin"] is None else f"{r['margin']:g}",
            f"{r['discordance']:.3f}" if r.get("discordance") is not None else "",
            str(r.get("required_items", "")),
            str(r.get("planned_items", "")),
            f"{r['mde_at_planned']:.3f}" if "mde_at_planned" in r else "",
            term(r.get("note", "")),
        )
    Console().print(table)
    for r in rows:
        if r.get("discordance_note"):
            Console().print(f"{term(r['suite'])}: {term(r['discordance_note'])}", highlight=False)
