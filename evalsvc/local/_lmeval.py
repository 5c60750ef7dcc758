"""The managed lm-eval venv: ``<EVALSVC_HOME>/venvs/lmeval``, prepared on first use.

Contract:
- ``lmeval_venv_ready()`` says, with a few stat calls, whether the venv is complete: its marker
  (``.evalsvc-complete``, written last, atomically) names ``LMEVAL_REQUIREMENTS`` and its
  interpreter exists. ``prepare_lmeval_venv()`` returns that interpreter, preparing the venv
  first when it is not complete.
- Preparation installs ``LMEVAL_REQUIREMENTS`` (lm-eval pinned to the version evalsvc reads
  the logs of, with its API models; ``transformers`` for a local tokenizer directory, no torch)
  with PyPI's ``uv`` when it is installed (an evalsvc dependency; 23 s cold on a 2-core host
  against 92 s for pip, docs/benchmarks.md), else with pip. A spinner, or a line every
  ``LINE_EVERY_S`` when another display owns the terminal (``compare``'s progress bars), shows
  the elapsed time and the time left from this home's last preparation (else the typical
  figure); the installer's output goes to ``logs/prepare-venv-lmeval.log``.
- Concurrent first uses (several processes or threads sharing ``EVALSVC_HOME``) prepare it
  once: a file lock (``venvs/.lmeval.lock``, ``flock``) and a process lock serialise them, and
  whoever waited finds the marker and returns. A venv without the marker (an interrupted or
  failed preparation) is removed and built again; nobody uses it meanwhile, since every user
  either sees the marker or waits for the lock.
- A failed installer raises ``LocalError`` naming the log (the venv stays incomplete, so the
  next use tries again); a lock not had within ``LOCK_TIMEOUT_S`` raises it too.
- The installer gets a minimal environment (``evalsvc.subprocess_env``) plus proxies and the
  operator's pip/uv index settings; ``PIP_INDEX_URL``/``PIP_EXTRA_INDEX_URL`` are handed to uv
  as its own when uv's are not set, so a mirror configured for pip is used by either.
"""

from __future__ import annotations

import fcntl
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.markup import escape

from evalsvc.subprocess_env import child_env

from ._errors import LocalError
from ._paths import Layout, venv_python
from ._prepare import Preparer, _marker_ok, _python_works, _venv_key, _write_marker
from ._ui import info, run_logged

#: What the lmeval kind runs: the lm-eval release evalsvc's log reader and the engine-tokenizer
#: script were written against (the ``lmeval`` extra's floor), and transformers for lm-eval's
#: ``huggingface`` tokenizer backend (a local or hub tokenizer directory; without torch it loads
#: tokenizers only).
LMEVAL_REQUIREMENTS = ("lm-eval[api]==0.4.13", "transformers")
STEP = "venv-lmeval"
#: How long a waiter waits for another process's preparation before giving up.
LOCK_TIMEOUT_S = 1800.0
INSTALL_TIMEOUT_S = 1800.0
_KEY = _venv_key(LMEVAL_REQUIREMENTS, ())
_thread_lock = threading.Lock()
#: Beyond the base environment: proxies and the operator's index settings (pip's and uv's).
_INSTALL_KEEP = frozenset(
    {"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
     "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST", "PIP_CERT", "PIP_CONFIG_FILE",
     "PIP_CACHE_DIR", "PIP_NO_CACHE_DIR", "PIP_FIND_LINKS", "PIP_DEFAULT_TIMEOUT",
     "UV_INDEX_URL", "UV_DEFAULT_INDEX", "UV_EXTRA_INDEX_URL", "UV_INDEX", "UV_CACHE_DIR",
     "UV_NO_CACHE", "UV_NATIVE_TLS", "UV_HTTP_TIMEOUT", "UV_HTTP_RETRIES", "UV_OFFLINE"}
)


def lmeval_venv(layout: Layout | None = None) -> Path:
    return (layout or Layout.current()).venvs / "lmeval"


def lmeval_venv_ready(layout: Layout | None = None) -> bool:
    """Whether ``prepare_lmeval_venv()`` would return at once."""
    venv = lmeval_venv(layout)
    return _marker_ok(venv, _KEY) and venv_python(venv).exists()


def uv_binary() -> str | None:
    """The ``uv`` executable: the one the PyPI package installed beside evalsvc, else PATH's."""
    try:
        from uv import find_uv_bin

        return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        return shutil.which("uv")


def prepare_lmeval_venv(layout: Layout | None = None) -> Path:
    """The managed lm-eval venv's interpreter, preparing the venv first if it is not complete."""
    layout = layout or Layout.current()
    venv = lmeval_venv(layout)
    if lmeval_venv_ready(layout):
        return venv_python(venv)
    with _thread_lock, _file_lock(layout.venvs / ".lmeval.lock"):
        if lmeval_venv_ready(layout):  # prepared by whoever held the lock
            return venv_python(venv)
        return _prepare(layout, venv)


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        deadline = time.monotonic() + LOCK_TIMEOUT_S
        told = False
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not told:
                    info(f"waiting for another process preparing lm-eval (lock {path})")
                    told = True
                if time.monotonic() >= deadline:
                    raise LocalError(
                        f"another process has held {path} for {LOCK_TIMEOUT_S:.0f} s while "
                        "preparing lm-eval; if none is running, remove the file and retry"
                    ) from None
                time.sleep(0.5)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _prepare(layout: Layout, venv: Path) -> Path:
    preparer = Preparer(layout)
    log = layout.log(f"prepare-{STEP}")
    python = venv_python(venv)
    started = time.monotonic()
    if venv.exists():  # incomplete: interrupted or failed before its marker
        shutil.rmtree(venv)
    uv = uv_binary()
    env = _install_env(uv is not None)
    info(escape(
        f"preparing lm-eval for the lmeval suites on first use ({', '.join(LMEVAL_REQUIREMENTS)} "
        f"into {venv}, with {'uv' if uv else 'pip'}; once per EVALSVC_HOME)"
    ))
    if uv:
        create = [uv, "venv", "--no-config", "--python", sys.executable, str(venv)]
        install = [uv, "pip", "install", "--no-config", "--python", str(python),
                   *LMEVAL_REQUIREMENTS]
    else:
        create = [sys.executable, "-m", "venv", str(venv)]
        install = [str(python), "-m", "pip", "install", *LMEVAL_REQUIREMENTS]
    run_logged(f"creating {venv}", create, log, env=env, cwd=layout.venvs, timeout=300)
    run_logged(
        "installing lm-eval",
        install,
        log,
        env=env,
        cwd=layout.venvs,
        timeout=INSTALL_TIMEOUT_S,
        expected_s=preparer.expected(STEP if uv else f"{STEP}-pip"),
    )
    run_logged(
        f"checking {venv}",
        [str(python), "-c", "import lm_eval, transformers; print(lm_eval.__version__)"],
        log,
        env=child_env(),
        timeout=600,
    )
    if not _python_works(python):
        raise LocalError(f"{python} does not run after preparing it (log: {log})")
    _write_marker(venv, _KEY)
    preparer._done(STEP if uv else f"{STEP}-pip", started)
    return python


def _install_env(with_uv: bool) -> dict[str, str]:
    env = child_env(
        {"PIP_DISABLE_PIP_VERSION_CHECK": "1", "UV_PYTHON_DOWNLOADS": "never"},
        keep=_INSTALL_KEEP,
    )
    if with_uv:
        # A mirror configured for pip is the operator's index: uv reads only its own names.
        for pip_name, uv_name in (("PIP_INDEX_URL", "UV_INDEX_URL"),
                                  ("PIP_EXTRA_INDEX_URL", "UV_EXTRA_INDEX_URL")):
            if pip_name in env and uv_name not in env and "UV_DEFAULT_INDEX" not in env:
                env[uv_name] = env[pip_name]
    return env


__all__ = [
    "LMEVAL_REQUIREMENTS",
    "lmeval_venv",
    "lmeval_venv_ready",
    "prepare_lmeval_venv",
    "uv_binary",
]
