"""Suites: the plugin contract, the registry, the YAML catalog and the built-in kinds.

Contract: suites produce items, are handed an endpoint client, and score outputs. They never
touch the database or open sockets; the runner persists what they return.
"""

from evalsvc.suites._base import (
    Analysis,
    Emit,
    GatePolicy,
    LazyItems,
    PairedColumns,
    Suite,
    SuiteDoesNotFit,
    SuiteSpec,
    first_divergent_token,
    flips,
    paired_scores,
    prompt_text,
)
from evalsvc.suites._calibrate import (
    PILOT_SUFFIX,
    CalibrationPolicy,
    GroupChoice,
    Rung,
    RungScore,
    choose,
    next_rungs,
    pilot_name,
    pilot_seed,
)
from evalsvc.suites._calibrate import record as calibration_record

# ``suite_kinds`` (not ``kinds``): ``evalsvc.suites.kinds`` is the subpackage of built-in kinds,
# and importing it would shadow a function of the same name on this package.
from evalsvc.suites._paths import catalog_dir
from evalsvc.suites._present import (
    Chart,
    Finding,
    Scored,
    Severity,
    ViewInput,
    flip_counts_finding,
    markdown_table,
    num,
    pct,
)
from evalsvc.suites._registry import (
    SuiteError,
    SuiteSet,
    broken_kinds,
    catalog,
    load_suite,
    read_yaml,
    register,
    resolve,
    suite_kinds,
)
from evalsvc.suites._sampling import SamplingPolicy, sampling_finding, sampling_headline
from evalsvc.suites._thinking_view import (
    thinking_charts,
    thinking_finding,
    thinking_headline,
    thinks,
)

__all__ = [
    "SamplingPolicy",
    "sampling_finding",
    "sampling_headline",
    "thinking_charts",
    "thinks",
    "thinking_finding",
    "thinking_headline",
    "PILOT_SUFFIX",
    "CalibrationPolicy",
    "GroupChoice",
    "Rung",
    "RungScore",
    "calibration_record",
    "choose",
    "next_rungs",
    "pilot_name",
    "pilot_seed",
    "Analysis",
    "LazyItems",
    "PairedColumns",
    "Chart",
    "Finding",
    "Scored",
    "Severity",
    "ViewInput",
    "flip_counts_finding",
    "markdown_table",
    "num",
    "pct",
    "prompt_text",
    "Emit",
    "GatePolicy",
    "Suite",
    "SuiteDoesNotFit",
    "SuiteError",
    "SuiteSet",
    "SuiteSpec",
    "broken_kinds",
    "catalog",
    "catalog_dir",
    "first_divergent_token",
    "flips",
    "suite_kinds",
    "load_suite",
    "read_yaml",
    "paired_scores",
    "register",
    "resolve",
]
