"""``evalsvc export RUN_ID``: a run's samples as Parquet, CSV or JSON Lines, as Every Eval Ever
instance-level files (``--format eee``), or to MLflow tracking (``--mlflow TRACKING_URI``;
``evalsvc.services.exports``)."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated, Literal

import typer

from evalsvc.db import StoreError

from ._dbcommon import DatabaseUrlOption, fail, fail_store, open_store
from ._exit import exit_code


class Format(StrEnum):
    parquet = "parquet"
    csv = "csv"
    jsonl = "jsonl"
    eee = "eee"


def export(
    run_id: Annotated[str, typer.Argument(help="Run id or a unique prefix of it.")],
    format: Annotated[
        Format,
        typer.Option(
            "--format", "-f",
            help="File format (eee: Every Eval Ever instance-level files, one per endpoint).",
        ),
    ] = Format.parquet,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", "-o",
            help="Output file [default: RUN_ID.FORMAT]; for eee a directory [default: RUN_ID-eee].",
            show_default=False,
        ),
    ] = None,
    mlflow: Annotated[
        str | None,
        typer.Option(
            "--mlflow",
            metavar="TRACKING_URI",
            help="Log the run to MLflow instead (one MLflow run per candidate), e.g. "
            # Typer renders help as rich markup: "[mlflow]" unescaped was read as a tag and
            # dropped ("pip install 'evalsvc'").
            "sqlite:///mlflow.db or http://mlflow:5000; needs pip install 'evalsvc\\[mlflow]'.",
            show_default=False,
        ),
    ] = None,
    mlflow_experiment: Annotated[
        str, typer.Option("--mlflow-experiment", help="MLflow experiment (created if missing).")
    ] = "evalsvc",
    database_url: DatabaseUrlOption = None,
) -> None:
    """Export every sample of a run, one row per (endpoint, suite, item, repeat)."""
    from evalsvc.db import export_samples
    from evalsvc.services import exports, history

    store = open_store(database_url)
    try:
        found = history.find_run(store, run_id)  # an id or a unique prefix, as everywhere
        run_id = found.id
        if mlflow is not None:
            for logged in exports.export_mlflow(
                store, run_id, tracking_uri=mlflow, experiment=mlflow_experiment
            ):
                done = "logged" if logged.created else "already logged"
                typer.echo(
                    f"{done} {logged.candidate} as MLflow run {logged.mlflow_run_id} "
                    f"(experiment {logged.experiment_id}) at {mlflow}"
                )
            return
        if format is Format.eee:
            for written in exports.export_eee(store, run_id, out_dir=out or Path(f"{run_id}-eee")):
                typer.echo(f"wrote {written.records} {written.endpoint} records to {written.path}")
            return
        path = out or Path(f"{run_id}.{format.value}")
        table: Literal["parquet", "csv", "jsonl"] = format.value  # type: ignore[assignment]  # eee returned above
        rows = export_samples(store, run_id, format=table, out=path,
                              labels=history.role_labels(found))
    except (LookupError, ValueError) as err:  # unknown or ambiguous id: a usage error
        fail(str(err), exit_code(err))
    except StoreError as err:
        fail_store(err)
    except exports.MlflowUnreachable as err:
        fail(str(err), exit_code(err))
    finally:
        store.close()
    typer.echo(f"wrote {rows} samples to {path}")


def main() -> None:
    typer.run(export)


if __name__ == "__main__":
    main()
