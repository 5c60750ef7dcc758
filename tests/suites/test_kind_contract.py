"""Every registered suite kind registers and presents like the others (one contract test over
``suite_kinds()``, after lm-eval's task contract tests): an entry point of group
``evalsvc.suites`` named as the kind, a description, a declared gate with its rationale and
sources, a template beside the module when it declares one, and presentation class methods that
take an empty or partial report entry without raising (a report of a partly failed run must
still render). The ``toolcalls`` and ``structured`` kinds are also planned from their catalog
suites without an endpoint, deterministically."""

from __future__ import annotations

import asyncio
from importlib.metadata import entry_points

import pytest

from evalsvc.suites import Suite, ViewInput, load_suite, suite_kinds

KINDS = sorted(suite_kinds())


def _view(entry: dict | None) -> ViewInput:  # type: ignore[type-arg]
    return ViewInput(suite="s", role="candidate:0", entry=entry, alpha=0.05,
                     scores=lambda fields: [], samples=lambda: [])


@pytest.mark.parametrize("name", KINDS)
def test_kind_registers_and_presents_like_the_others(name: str) -> None:
    cls: type[Suite] = suite_kinds()[name]
    eps = {ep.name: ep for ep in entry_points(group="evalsvc.suites")}
    assert name in eps and eps[name].load() is cls and cls.kind == name
    assert cls.description
    if cls.gate_default is not None:
        assert cls.gate_default.rationale and cls.gate_default.sources
    if cls.view_template:
        source = cls.template_source()
        assert source and "{#" in source  # a template with its own header comment
    for entry in ({}, {"details": {}}, {"details": {"gate": {}}, "verdict": "inconclusive"}):
        assert isinstance(cls.findings(entry), list)
        headline = cls.headline(entry)
        assert headline is None or isinstance(headline, str)
        assert isinstance(cls.view_model(_view(entry)), dict)
    assert isinstance(cls.view_model(_view(None)), dict)
    label = cls.slice_label({})
    assert label is None or isinstance(label, str)


@pytest.mark.parametrize("suite", ["toolcalls", "toolcalls-smoke", "structured"])
def test_tool_and_structured_suites_plan_without_an_endpoint(suite: str) -> None:
    built = load_suite(suite)
    first = asyncio.run(built.plan(None, None))  # type: ignore[arg-type]  # sends nothing
    again = asyncio.run(load_suite(suite).plan(None, None))  # type: ignore[arg-type]
    assert len(first) == built.item_count() and first == again
    assert len({i.id for i in first}) == len(first)
    # The flips page rebuilds a prompt from the id alone.
    assert built.prompt(first[-1].id, {}) is not None


def test_toolcalls_plan_sizes_the_calling_share() -> None:
    """The schema gate sees only the items that expect a call (8 of 12 weights by default):
    `evalsvc plan` asks for enough items that they reach the paired test's flip-free size."""
    import math

    from evalsvc.stats import min_n_flip_free

    suite = load_suite("toolcalls")
    assert suite.min_items_to_pass(0.05, 0.05) == math.ceil(min_n_flip_free(0.05, 0.05) * 12 / 8)
    assert suite.item_count() >= suite.min_items_to_pass(0.05, 0.05)  # the catalog suite can pass
