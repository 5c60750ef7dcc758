"""Suites: the plugin contract, the registry, the YAML catalog and the built-in kinds.

Contract: suites produce items, are handed an endpoint client, and score outputs. They never
touch the database or open sockets; the runner persists what they return.
"""

from evalsvc.suites._base import (
    Analysis,
    Emit,
    GatePolicy,
    Suite,
    SuiteSpec,
    flips,
    paired_scores,
)
from evalsvc.suites._registry import (
    SuiteError,
    SuiteSet,
    catalog,
    catalog_dir,
    kinds,
    load_suite,
    register,
    resolve,
)

__all__ = [
    "Analysis",
    "Emit",
    "GatePolicy",
    "Suite",
    "SuiteError",
    "SuiteSet",
    "SuiteSpec",
    "catalog",
    "catalog_dir",
    "flips",
    "kinds",
    "load_suite",
    "paired_scores",
    "register",
    "resolve",
]
