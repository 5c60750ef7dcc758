"""What the compare, suites and endpoints commands share: the stderr console, the one-line error
exit, opening the store.

Contract: ``exit_for(exc)`` prints one line (``error: ...``, untrusted text escaped for the
terminal) and returns the ``typer.Exit`` whose code ``_exit.exit_code`` gives; ``open_store``
creates a brand-new SQLite database at head on first use and refuses any other database that is
not at head.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

import typer
from rich.console import Console

from evalsvc.cli._safe import term

from ._exit import exit_code

# CI logs are not terminals, and rich would fold the verdict table into 80 columns; give them
# room unless the user set COLUMNS.
err = Console(
    stderr=True,
    width=None if sys.stderr.isatty() or os.environ.get("COLUMNS") else 160,
)

VERDICT_STYLE = {
    "pass": "bold green",
    "fail": "bold red",
    "inconclusive": "bold yellow",
    "error": "bold magenta",
    "non-comparable": "bold cyan",
}


def die(message: str, code: int) -> typer.Exit:
    err.print(f"[bold red]error:[/] {term(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def describe(exc: BaseException) -> str:
    """The one line an exception is reported with (a pydantic error: its first five fields)."""
    from pydantic import ValidationError

    return one_line(exc) if isinstance(exc, ValidationError) else str(exc)


def exit_for(exc: BaseException) -> typer.Exit:
    """Print ``exc`` as one line and return the exit with its code (``_exit.exit_code``)."""
    return die(describe(exc), exit_code(exc))


def open_store(db: str | None) -> Any:
    """Open the store. A brand-new SQLite database is created at head on first use (the embedded
    default must just work); any other database must already be at head (``evalsvc db upgrade``)."""
    from evalsvc.db import Store, StoreError

    try:
        store = Store.from_url(db)
        store.ensure_ready(upgrade_fresh_sqlite=True)
    except StoreError as exc:
        raise exit_for(exc) from exc
    return store


@contextlib.contextmanager
def store_errors() -> Iterator[None]:
    """A store error inside the block exits with its one line and code (2 or 4, never 1)."""
    from evalsvc.db import StoreError

    try:
        yield
    except StoreError as exc:
        raise exit_for(exc) from exc


def one_line(exc: Any) -> str:
    """A pydantic ValidationError as one line: ``field: message; ...``."""
    parts = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:5]]
    return "invalid options: " + "; ".join(parts)


def raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")
