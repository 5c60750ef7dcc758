"""Export a run's samples as a table (Parquet, CSV or JSON Lines).

One row per sample, joined with the endpoint snapshot of its role (URL, model), with the item's
``prompt`` as text where a kind stores it in a sample's ``data`` (``dataset`` and replay suites
keep it with the baseline's first answer; every row of the item gets it; chat messages are
``[role] content`` blocks, as the dashboard shows them; empty for kinds that rebuild prompts
from the seed). ``data`` is
kept as a JSON string in Parquet/CSV (its keys differ by suite kind, so it has no fixed
column schema) and as an object in JSON Lines. CSV text cells that a spreadsheet would run as a
formula (``= + - @``, tab, CR first) get a leading apostrophe (``evalsvc.textsafe.csv_cell``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import pandas as pd

# egress: the one URL redaction helper (stdlib only, no I/O), so exports of runs stored before
# the userinfo rule never show a credential (docs/security.md).
from evalsvc.domain import prompt_text
from evalsvc.endpoints._urls import redact_text, redact_url
from evalsvc.textsafe import csv_cell

from ._rows import SAMPLE_KEY, SAMPLE_VALUES
from ._store import Store

ExportFormat = Literal["parquet", "csv", "jsonl"]
EXPORT_FORMATS: tuple[str, ...] = ("parquet", "csv", "jsonl")

#: The sample columns (``_rows``: the store's own list) with the endpoint's URL and model after
#: the role label.
COLUMNS = [
    *SAMPLE_KEY[:2],
    "role",
    "endpoint_url",
    "endpoint_model",
    *SAMPLE_KEY[2:],
    "prompt",
    *SAMPLE_VALUES,
]


def samples_frame(store: Store, run_id: str, labels: dict[str, str] | None = None
                  ) -> pd.DataFrame:
    """The samples of ``run_id`` as a DataFrame (``data`` left as dicts). ``endpoint`` is each
    role's label from ``labels`` (the services' ``history.role_labels``: the endpoint as people
    name it), ``role`` the key it is stored under (``baseline``, ``candidate:N``); without
    ``labels`` both are the role."""
    snapshots = store.get_endpoint_snapshots(run_id)
    records: list[dict[str, Any]] = []
    prompts: dict[tuple[str, str], str] = {}
    for sample in store.get_samples(run_id):
        endpoint = snapshots.get(sample.endpoint)
        prompt = prompt_text(sample.data.get("prompt"))
        if prompt is not None:
            prompts[(sample.suite, sample.item_id)] = prompt
        records.append(
            {
                "run_id": run_id,
                **sample.model_dump(),
                "endpoint": (labels or {}).get(sample.endpoint, sample.endpoint),
                "role": sample.endpoint,
                "error": redact_text(sample.error) if sample.error else None,
                "endpoint_url": redact_url(endpoint[0].url) if endpoint else None,
                "endpoint_model": endpoint[0].model if endpoint else None,
            }
        )
    for record in records:  # the item's prompt on every row, wherever it was stored
        record["prompt"] = prompts.get((record["suite"], record["item_id"]))
    frame = pd.DataFrame.from_records(records, columns=COLUMNS)
    # Nullable integer dtypes: a missing token count must stay missing, not become 0 or 1.0.
    for column in ("repeat", "prompt_tokens", "completion_tokens"):
        frame[column] = frame[column].astype("Int64")
    for column in ("score", "latency_s", "ttft_s"):
        frame[column] = frame[column].astype("float64")
    return frame


def export_samples(store: Store, run_id: str, *, format: ExportFormat, out: Path,
                   labels: dict[str, str] | None = None) -> int:
    """Write the samples of ``run_id`` to ``out`` (``labels``: as :func:`samples_frame`);
    returns the number of rows.

    Raises LookupError when the run does not exist.
    """
    if store.get_run(run_id) is None:
        raise LookupError(f"no run {run_id!r}")
    frame = samples_frame(store, run_id, labels)
    out.parent.mkdir(parents=True, exist_ok=True)
    if format == "jsonl":
        frame.to_json(out, orient="records", lines=True, force_ascii=False)
        return len(frame)
    frame["data"] = [json.dumps(d, sort_keys=True) for d in frame["data"]]
    if format == "parquet":
        frame.to_parquet(out, index=False)
    elif format == "csv":
        # Spreadsheets run cells that start with = + - @ as formulas (CSV injection); model
        # outputs and ids are untrusted text, so such cells get a leading apostrophe (OWASP).
        # Numeric columns are untouched: a negative score is a number, not a formula.
        text_columns = [c for c in frame.columns if not pd.api.types.is_numeric_dtype(frame[c])]
        for column in text_columns:
            frame[column] = frame[column].map(csv_cell)
        # RFC 4180 line ends: with them the writer also quotes a field holding a bare CR, which
        # it leaves unquoted with "\n" line ends (and readers then split the row there).
        frame.to_csv(out, index=False, lineterminator="\r\n")
    else:
        raise ValueError(f"unknown export format {format!r}; use one of {EXPORT_FORMATS}")
    return len(frame)
