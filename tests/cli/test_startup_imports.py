"""The CLI starts fast: ``evalsvc --help``, ``--version`` and ``suites list`` load no database,
HTTP, web or data-science library (docs/benchmarks.md, "CLI start-up").

The test asserts the imports, not the time, so it holds on a busy host: each command runs in a
fresh interpreter and reports which of the heavy top-level packages ended up in ``sys.modules``.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = (
    "sqlalchemy", "alembic", "aiohttp", "fastapi", "pandas", "pyarrow", "datasets", "scipy"
)

_PROBE = """
import contextlib, io, json, sys
from evalsvc.cli.main import app
out = io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
    try:
        app(sys.argv[1:], prog_name="evalsvc")
    except SystemExit as exc:
        code = exc.code
    else:
        code = 0
loaded = sorted({m.split(".")[0] for m in sys.modules} & set(HEAVY))
print(json.dumps({"code": code, "out": out.getvalue(), "loaded": loaded}))
"""


def _run(*args: str) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", f"HEAVY = {HEAVY!r}\n" + _PROBE, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (("--help",), "compare"),
        (("--version",), "evalsvc "),
        (("runs", "--help"), "gate"),
        # The catalog listed in full: every suite's gate and cost, the dataset suite's rows
        # counted from its JSON Lines file without ``datasets``, the kinds without scipy.
        (("suites", "list"), "dataset-qa"),
        (("suites", "list", "--json"), '"gate": "accuracy, margin 0.05"'),
    ],
)
def test_start_up_loads_no_heavy_library(args: tuple[str, ...], expect: str) -> None:
    result = _run(*args)
    assert result["code"] == 0
    assert expect in str(result["out"])  # the command really ran
    assert result["loaded"] == [], f"evalsvc {' '.join(args)} imported {result['loaded']}"
