"""The web dashboard's use cases: what each page shows, as plain dicts (no HTML here).

Contract: functions take a ``Store`` and request values and return JSON-able dicts built from
the stored run (its report, gates, snapshots and samples); they never format HTML (the views in
``evalsvc.dashboard`` do, with escaping) and never build SQL (``Store.dashboard`` does). A run
that failed part-way or has no report yet still renders: missing pieces are ``None``/empty,
never an error. Numbers shown are the gate's own (from the report). What is particular to a
suite kind (its findings, flips, slices, prompts, its page's view model and template) comes
from the kind (``evalsvc.suites.Suite``), looked up in the registry by the stored kind name:
this module knows no kind by name.

One module per page: ``runs`` (the runs list, the run page, comparing two runs), ``suite``,
``flips``, ``samples``, ``trends``; ``_common`` what they share.
"""

from __future__ import annotations

from ._common import (
    NotFound,
    endpoint_labels,
    endpoint_name,
    kind_class,
    kind_template,
    suite_label,
)
from .flips import first_divergence, flips_view
from .runs import (
    PROVENANCE_FIELDS,
    _ci_bar,
    compare_runs,
    decode_cursor,
    encode_cursor,
    live_status,
    parse_filters,
    run_page,
    runs_list,
)
from .samples import OUTCOMES, SAMPLES_PAGE_MAX, samples_view
from .suite import suite_view
from .trends import trend, trend_pairs

__all__ = [
    "NotFound",
    "OUTCOMES",
    "PROVENANCE_FIELDS",
    "SAMPLES_PAGE_MAX",
    "_ci_bar",
    "compare_runs",
    "decode_cursor",
    "encode_cursor",
    "endpoint_labels",
    "endpoint_name",
    "first_divergence",
    "flips_view",
    "kind_class",
    "kind_template",
    "live_status",
    "parse_filters",
    "run_page",
    "runs_list",
    "samples_view",
    "suite_label",
    "suite_view",
    "trend",
    "trend_pairs",
]
