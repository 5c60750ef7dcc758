"""The package layering of docs/architecture.md holds: import-linter's contracts (pyproject.toml,
``[tool.importlinter]``) are all kept. ``make lint`` runs the same check."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept() -> None:
    exe = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    result = subprocess.run([exe], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout and "kept" in result.stdout


def test_starting_evalsvc_loads_no_scipy_submodule() -> None:
    """The CLI, the services, the runner, the web app and the worker import without
    ``scipy.stats``/``special``/``optimize`` (evalsvc.stats reaches them through scipy's lazy
    loading): a refused command or a server's start need none, and they cost 2 CPU-seconds a
    process on a 2-core host."""
    code = (
        "import sys; import evalsvc.cli.main, evalsvc.services, evalsvc.runner, evalsvc.gates, "
        "evalsvc.webapp, evalsvc.scheduler, evalsvc.reports; "
        "print(sorted(m for m in sys.modules if m.split('.')[:2] in "
        "(['scipy', 'stats'], ['scipy', 'special'], ['scipy', 'optimize'])))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]", result.stdout
