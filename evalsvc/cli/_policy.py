"""A pipeline's policy on what a verdict may rest on, shared by ``compare``, ``runs gate`` and
``attest verify``: ``--max-reuse-age AGE`` (no blessed baseline older than AGE) and
``--no-allowed-differences`` (no difference beyond quantization, even an allowed one).

Contract: ``parse_age`` reads ``30s``, ``15m``, ``12h``, ``3d``, ``2w`` or plain seconds and
raises ``typer.BadParameter`` otherwise (exit 2 naming the accepted forms). ``refused(report,
…)`` prints why the policy refuses the report's basis (``evalsvc.reports.policy_refusals``) and
returns True; a refused **pass** exits 1 (docs/cli.md): the evidence is not what the pipeline
accepts, so nothing ships; any other verdict keeps its own exit code.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from ._common import err
from ._safe import term


def parse_age(text: str | None) -> float | None:
    """Seconds in an age such as ``3d`` (module contract); None for None."""
    if text is None:
        return None
    from evalsvc.reports import parse_age as seconds

    try:
        return seconds(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc


MaxReuseAgeOption = Annotated[
    str | None,
    typer.Option(
        "--max-reuse-age",
        metavar="AGE",
        help="Refuse a verdict that rests on a blessed baseline older than AGE (e.g. 3d, 12h) "
        "when the run used it: a pass exits 1.",
    ),
]
NoAllowedDifferencesOption = Annotated[
    bool,
    typer.Option(
        "--no-allowed-differences",
        help="Refuse a verdict that rests on any allowed difference beyond quantization "
        "(--allow-difference, a suite's comparability.allow): a pass exits 1.",
    ),
]


def refusals(report: dict[str, Any] | None, max_reuse_age: str | None,
             no_allowed_differences: bool) -> list[str]:
    """Why the policy refuses ``report``'s basis; [] when it accepts it (or there is none)."""
    from evalsvc.reports import basis, policy_refusals

    limit = parse_age(max_reuse_age)
    if report is None or (limit is None and not no_allowed_differences):
        return []
    return policy_refusals(basis(report), max_reuse_age_s=limit,
                           allowed_differences=not no_allowed_differences)


def refused(report: dict[str, Any] | None, max_reuse_age: str | None,
            no_allowed_differences: bool) -> bool:
    """Print each refusal (``refused by policy: …``) and say whether there was any."""
    found = refusals(report, max_reuse_age, no_allowed_differences)
    for why in found:
        err.print(f"[bold red]refused by policy:[/] {term(why)}", highlight=False)
    return bool(found)


def print_basis(report: dict[str, Any]) -> None:
    """The report's basis, one ``basis:`` line each (stderr)."""
    from evalsvc.reports import basis, basis_lines

    for line in basis_lines(basis(report)):
        err.print(f"[cyan]basis:[/] {term(line)}", highlight=False)
