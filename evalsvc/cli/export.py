"""``evalsvc export RUN_ID``: a run's samples as Parquet, CSV or JSON Lines."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from evalsvc.db import StoreError

from ._dbcommon import DatabaseUrlOption, fail, fail_store, open_store


class Format(StrEnum):
    parquet = "parquet"
    csv = "csv"
    jsonl = "jsonl"


def export(
    run_id: Annotated[str, typer.Argument(help="Run id.")],
    format: Annotated[Format, typer.Option("--format", "-f", help="File format.")] = Format.parquet,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", "-o", help="Output file [default: RUN_ID.FORMAT].", show_default=False
        ),
    ] = None,
    database_url: DatabaseUrlOption = None,
) -> None:
    """Export every sample of a run, one row per (endpoint, suite, item, repeat)."""
    from evalsvc.db import export_samples

    path = out or Path(f"{run_id}.{format.value}")
    store = open_store(database_url)
    try:
        rows = export_samples(store, run_id, format=format.value, out=path)
    except LookupError as err:
        fail(str(err), 1)
    except StoreError as err:
        fail_store(err)
    finally:
        store.close()
    typer.echo(f"wrote {rows} samples to {path}")


def main() -> None:
    typer.run(export)


if __name__ == "__main__":
    main()
