"""The known local servers: the bf16 baseline and the quantized candidates, as vLLM commands.

Contract: pure; maps names to ``ServerSpec`` (command line of the launcher in the managed vllm
venv, environment, model directory, served model name) and to the model each one needs.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from evalsvc.settings import Settings

from ._errors import UnknownCandidateError
from ._host import emulation_reason
from ._paths import Layout, venv_python
from ._serve import HOST, PORT_PLACEHOLDER, ServerSpec

BASELINE = "bf16"
CANDIDATES: tuple[str, ...] = ("fp8-kv", "w8a8", "w4a16")
DEFAULT_CANDIDATES: tuple[str, ...] = ("fp8-kv",)
MODEL_FAMILY = "smollm2-135m"
MAX_MODEL_LEN = 4096
KV_CACHE_GIB = 2
ENV_EAGER = "EVALSVC_LOCAL_EAGER"
# --enforce-eager skips torch.compile: ~34 s to healthy instead of ~48-115 s per server, which
# matters with four servers sharing two cores; see README/report for the throughput trade-off.
EAGER_DEFAULT = True

LAUNCHER = Path(__file__).with_name("_launcher.py")


@dataclass(frozen=True)
class ServerKind:
    model: str
    """Directory name under ``models/`` that holds the checkpoint."""
    extra_args: tuple[str, ...] = ()
    emulated: bool = False
    """A bf16 checkpoint holding the fake-quantized weights, for hosts without the kernel."""


KINDS: dict[str, ServerKind] = {
    BASELINE: ServerKind("bf16"),
    # Same weights, FP8 (e4m3) KV cache: doubles the KV capacity at the same memory.
    "fp8-kv": ServerKind("bf16", ("--kv-cache-dtype", "fp8")),
    # compressed-tensors checkpoints; vLLM detects the scheme from config.json.
    "w8a8": ServerKind("w8a8"),
    "w4a16": ServerKind("w4a16"),
}
# Where the native kernel is missing (see _host.emulation_reason): the same 4-bit group-64
# values, dequantized to bf16 ("quantize-dequantize"), so the quality drift is the candidate's
# while the speed and memory are the baseline's.
EMULATED: dict[str, ServerKind] = {"w4a16": ServerKind("w4a16-qdq", emulated=True)}


def server_kind(name: str) -> ServerKind:
    """The kind serving ``name`` on this host (an emulated one where the kernel is missing)."""
    if name in EMULATED and emulation_reason(name) is not None:
        return EMULATED[name]
    return KINDS[name]


def validate_candidates(names: Iterable[str]) -> tuple[str, ...]:
    """Known candidate names, de-duplicated in order; raises ``UnknownCandidateError``."""
    out: list[str] = []
    for raw in names:
        name = raw.strip()
        if not name:
            continue
        if name not in CANDIDATES:
            known = ", ".join(CANDIDATES)
            raise UnknownCandidateError(f"unknown candidate {name!r} (known: {known})")
        if name not in out:
            out.append(name)
    return tuple(out)


def parse_candidates(text: str) -> tuple[str, ...]:
    """``"fp8-kv,w8a8"`` → validated names."""
    return validate_candidates(text.split(","))


def eager_enabled() -> bool:
    raw = Settings().local_eager.strip().lower()
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    return EAGER_DEFAULT


def served_model_name(name: str) -> str:
    """``smollm2-135m-<name>``, with ``-qdq`` when this host serves an emulated checkpoint."""
    return f"{MODEL_FAMILY}-{name}" + ("-qdq" if server_kind(name).emulated else "")


def server_env(layout: Layout) -> dict[str, str]:
    return {
        "VLLM_CPU_KVCACHE_SPACE": str(KV_CACHE_GIB),
        # The saved AOT compile artefact fails to reload on CPU, so every start would recompile.
        "VLLM_USE_AOT_COMPILE": "0",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "VLLM_CACHE_ROOT": str(layout.vllm_cache),
        "TORCHINDUCTOR_CACHE_DIR": str(layout.inductor_cache),
        "PYTHONUNBUFFERED": "1",
        # Read by the launcher, which runs in the managed venv without evalsvc (its docstring).
        ENV_SHM_NAP: format(Settings().local_shm_nap_us, "g"),
        # VLLM_CPU_OMP_THREADS_BIND: one core per server, see _core_binding (never both cores: ~3x slower).
    }


ENV_BIND = "EVALSVC_LOCAL_BIND"
ENV_SHM_NAP = "EVALSVC_LOCAL_SHM_NAP_US"


def _core_binding(name: str) -> dict[str, str]:
    """Give the baseline and the candidates different cores (``EVALSVC_LOCAL_BIND=auto`` opts out).

    vLLM-CPU's automatic binding runs each server's model thread on the *first* core and keeps
    the last one for its scheduler, so on a 2-core host every local server computes on core 0 and
    a baseline/candidate comparison runs at half speed. One OMP thread per server on its own core
    (baseline on core 0, candidates on core 1) keeps the single-thread setting that docs/local-endpoints.md
    measured as fastest (binding *both* cores to one server was ~3x slower) while letting the
    paired requests run side by side.
    """
    ncpu = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if Settings().local_bind.strip().lower() == "auto" or ncpu < 2:
        return {}
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(ncpu))
    core = cores[0] if name == BASELINE else cores[1]
    return {"VLLM_CPU_OMP_THREADS_BIND": str(core)}


def build_spec(layout: Layout, name: str, *, eager: bool | None = None) -> ServerSpec:
    kind = server_kind(name)
    model_dir = layout.model_dir(kind.model)
    argv = [
        str(venv_python(layout.vllm_venv)),
        str(LAUNCHER),
        "serve",
        str(model_dir),
        "--host",
        HOST,
        "--port",
        PORT_PLACEHOLDER,
        "--dtype",
        "bfloat16",
        "--max-model-len",
        str(MAX_MODEL_LEN),
        "--served-model-name",
        served_model_name(name),
        *kind.extra_args,
    ]
    if eager_enabled() if eager is None else eager:
        argv.append("--enforce-eager")
    launcher_id = "launcher@" + hashlib.sha256(LAUNCHER.read_bytes()).hexdigest()[:12]
    return ServerSpec(
        identity=tuple(launcher_id if a == str(LAUNCHER) else a for a in argv),
        name=name,
        role="baseline" if name == BASELINE else "candidate",
        argv=tuple(argv),
        env={**server_env(layout), **_core_binding(name)},
        model_dir=str(model_dir),
        served_model_name=served_model_name(name),
        smoke_test=True,
    )
