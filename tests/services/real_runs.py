"""Real runs of a small reasoning suite for the services tests (alerts, blessed baselines).

A baseline and a candidate ``LevelServer`` on loopback (``tests/runner/level_server.py``: the
accuracy is planted per level and can be changed between runs), a two-task reasoning suite
file, and the ``RunSpec`` of one (baseline, candidate, suite) run, so that every run of a test
module is of the same identity.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from evalsvc.domain import EndpointRef, RunOptions, RunSpec
from tests.runner.level_server import LevelServer, level_server

SEED = 5


def write_suite(folder: Path, name: str, n: int, seed: int = SEED) -> Path:
    """A ``reasoning`` suite file ``<folder>/<name>.yaml``: ``n`` items of two level-1 tasks,
    16 tokens each, gated at a margin of 0.1."""
    path = folder / f"{name}.yaml"
    path.write_text(f"""\
name: {name}
kind: reasoning
seed: {seed}
params:
  n: {n}
  max_tokens: 16
  tasks: [{{family: arithmetic, level: 1}}, {{family: lists, level: 1}}]
gate:
  margin: 0.1
""")
    return path


@contextmanager
def server_pair(accuracy: dict[int, float],
                seeds: list[int]) -> Iterator[tuple[LevelServer, LevelServer]]:
    """A baseline and a candidate server that know items ``k`` < 40 of every level of
    ``seeds`` (building one reads every such item: about a second)."""
    with ExitStack() as stack:
        yield (stack.enter_context(level_server(accuracy, seeds, per_level=40)),
               stack.enter_context(level_server(accuracy, seeds, per_level=40)))


def run_spec(suite: Path | str, base: str, cand: str, *, base_name: str | None = None,
             cand_name: str | None = None, **options: Any) -> RunSpec:
    """One candidate against one baseline on one suite, 8 requests at a time unless
    ``options`` (``RunOptions`` fields) say otherwise."""
    return RunSpec(baseline=EndpointRef(url=base, name=base_name),
                   candidates=[EndpointRef(url=cand, name=cand_name)], suites=[str(suite)],
                   options=RunOptions(**{"concurrency": 8, **options}))
