"""``evalsvc export RUN_ID``: a run's samples as Parquet, CSV or JSON Lines."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from evalsvc.db import StoreError

from ._dbcommon import DatabaseUrlOption, fail, fail_store, open_store
from ._exit import exit_code


class Format(StrEnum):
    parquet = "parquet"
    csv = "csv"
    jsonl = "jsonl"


def export(
    run_id: Annotated[str, typer.Argument(help="Run id or a unique prefix of it.")],
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
    from evalsvc.services import history

    store = open_store(database_url)
    try:
        run_id = history.find_run(store, run_id).id  # an id or a unique prefix, as everywhere
        path = out or Path(f"{run_id}.{format.value}")
        rows = export_samples(store, run_id, format=format.value, out=path)
    except (LookupError, ValueError) as err:  # unknown or ambiguous id: a usage error
        fail(str(err), exit_code(err))
    except StoreError as err:
        fail_store(err)
    finally:
        store.close()
    typer.echo(f"wrote {rows} samples to {path}")


def main() -> None:
    typer.run(export)


if __name__ == "__main__":
    main()
