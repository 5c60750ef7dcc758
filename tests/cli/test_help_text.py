"""Every command's ``--help`` as a user reads it: Typer renders help as rich markup, so a
bracketed word such as the extra in ``pip install 'evalsvc[mlflow]'`` vanished unless escaped
(``export --help`` said ``pip install 'evalsvc'.``)."""

from __future__ import annotations

import re

import click
import typer.main
from typer.testing import CliRunner

from evalsvc.cli.main import app


def _commands(group: click.Command, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = [path]
    if hasattr(group, "list_commands"):  # click groups, and evalsvc's lazy one
        ctx = click.Context(group)
        for name in group.list_commands(ctx):  # type: ignore[attr-defined]
            cmd = group.get_command(ctx, name)  # type: ignore[attr-defined]
            if cmd is not None:
                out += _commands(cmd, (*path, name))
    return out


def test_no_help_swallows_a_bracketed_extra() -> None:
    root = typer.main.get_command(app)
    runner = CliRunner()
    seen = 0
    for path in _commands(root):
        r = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "300"})
        assert r.exit_code == 0, (path, r.output)
        text = " ".join(r.output.split())
        assert not re.search(r"pip install '?evalsvc'?[ .,;)]", text), (path, text)
        seen += "evalsvc[" in text
    assert len(_commands(root)) > 40 and seen >= 1  # every command; export names its extra
    export = runner.invoke(app, ["export", "--help"], env={"COLUMNS": "300"})
    assert "pip install 'evalsvc[mlflow]'" in " ".join(export.output.split())
