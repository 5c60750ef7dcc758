"""Finding (and on first use preparing) a Python interpreter that has lm-evaluation-harness.

Contract: ``lmeval_python()`` returns, in this order,

1. ``$EVALSVC_LMEVAL_PYTHON`` when set;
2. evalsvc's own interpreter when lm-eval is installed beside it (``pip install
   'evalsvc[lmeval]'``: found with ``importlib.util.find_spec``, never imported here);
3. the managed lm-eval venv's interpreter (``<EVALSVC_HOME>/venvs/lmeval``,
   ``evalsvc.local._lmeval``), preparing that venv first when it is not complete, with a
   progress line and an estimate of the time left. Concurrent first uses prepare it once (a file
   lock); a waiter finds it complete.

Step 3 prepares only when ``EVALSVC_LMEVAL_AUTO_INSTALL`` allows it: unset, it does for an
in-process run (``evalsvc compare``) and not for a run a worker executes (server mode,
``evalsvc.suites.server_run``: a worker installs nothing from a package index unless its operator
set the variable to 1); 0 never, 1 always. Without a Python, or when the preparation fails, it raises
``LmevalError`` whose one line names the ways to get one (and the preparation's log); the
suite's preflight reports it, so the run skips the suite with that reason (``--strict``: exit 2).
evalsvc itself never imports lm_eval.

``evalsvc local lmeval`` prepares the venv ahead of a run and prints its Python.
"""

from __future__ import annotations

import importlib.util
import sys

from evalsvc.settings import Settings
from evalsvc.suites._base import server_run

ENV_PYTHON = "EVALSVC_LMEVAL_PYTHON"
ENV_AUTO = "EVALSVC_LMEVAL_AUTO_INSTALL"
_WAYS = (
    "install it beside evalsvc (`pip install 'evalsvc[lmeval]'`), set "
    f"{ENV_PYTHON} to a Python that has it, or prepare evalsvc's own lm-eval venv "
    "(`evalsvc local lmeval`)"
)


class LmevalError(RuntimeError):
    """lm-eval could not be installed, started or read."""


def lmeval_python() -> str:
    """A Python that can ``import lm_eval``; prepares the managed venv on first use."""
    settings = Settings()
    override = settings.lmeval_python.strip()
    if override:
        return override
    if importlib.util.find_spec("lm_eval") is not None:
        return sys.executable  # `pip install 'evalsvc[lmeval]'`: lm-eval beside evalsvc
    from evalsvc.local import LocalError
    from evalsvc.local._lmeval import lmeval_venv, lmeval_venv_ready, prepare_lmeval_venv

    if lmeval_venv_ready():
        return str(prepare_lmeval_venv())
    auto = settings.lmeval_auto_install
    if auto is False or (auto is None and server_run()):
        why = f"{ENV_AUTO}=0" if auto is False else f"a worker prepares it only with {ENV_AUTO}=1"
        raise LmevalError(
            f"no Python with lm-eval (evalsvc did not prepare {lmeval_venv()} itself: {why}): "
            f"{_WAYS}"
        )
    try:
        return str(prepare_lmeval_venv())
    except LocalError as exc:
        raise LmevalError(
            f"no Python with lm-eval: preparing it failed ({exc}); fix what the log says (the "
            f"network, or the package index: UV_INDEX_URL / PIP_INDEX_URL) and run again, or "
            f"{_WAYS}"
        ) from exc
