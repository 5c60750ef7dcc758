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


def test_root_help_imports_no_command_module() -> None:
    """``evalsvc --help`` lists every command from ``SHORT_HELP``, importing none of them."""
    proc = subprocess.run(
        [sys.executable, "-c",
         "import contextlib, io, sys\n"
         "from evalsvc.cli.main import app\n"
         "with contextlib.redirect_stdout(io.StringIO()):\n"
         "    try:\n"
         "        app(['--help'], prog_name='evalsvc')\n"
         "    except SystemExit:\n"
         "        pass\n"
         "print(sorted(m for m in sys.modules if m.startswith('evalsvc.cli.')))"],
        capture_output=True, text=True, timeout=120, check=True,
    )
    assert proc.stdout.strip().splitlines()[-1] == "['evalsvc.cli.main']"


def test_every_command_is_listed_with_its_own_help() -> None:
    """Each root command's line in ``--help`` is the first paragraph of the command's own help:
    a changed docstring must change ``SHORT_HELP`` too, and a new command needs its line."""
    from evalsvc.cli import main

    def first_paragraph(text: str) -> str:
        return " ".join(text.split("\n\n")[0].split())

    for name in main.COMMANDS:
        assert name in main.SHORT_HELP, f"add evalsvc {name}'s line to SHORT_HELP"
        command = main._load(name)
        own = first_paragraph(command.short_help or command.help or "")
        assert first_paragraph(main.SHORT_HELP[name]) == own, name
