"""The llama.cpp local servers: an F16 GGUF baseline and its quantized candidates.

Contract: pure; maps the llama.cpp server names to ``ServerSpec`` (the launcher
``_llamacpp_server.py`` run by the managed ``venvs/llamacpp`` interpreter) and to the GGUF each
one serves (``models/gguf-<scheme>/``, made by ``Preparer.gguf_model``). The names differ from
the vLLM ones (``bf16``, ``fp8-kv``...), so both engines' servers share one state file.

- ``f16``: the SmolLM2-135M GGUF dequantized to F16 weights, F16 KV cache (the baseline);
- ``q8_0``, ``q4_k_m``: the same weights quantized by llama.cpp's quantizers;
- ``q2_k``: 2-bit weights where the rows allow it (``_gguf_quant.py``): a candidate that breaks,
  served by ``make demo`` so that its table shows what a ``fail`` looks like;
- ``q8_0-kv``: the F16 weights with a ``q8_0`` K and V cache.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ._errors import UnknownCandidateError
from ._paths import Layout, venv_python
from ._serve import HOST, PORT_PLACEHOLDER, ServerSpec

ENGINE = "llamacpp"
BASELINE = "f16"
CANDIDATES: tuple[str, ...] = ("q8_0", "q4_k_m", "q2_k", "q8_0-kv")
DEFAULT_CANDIDATES: tuple[str, ...] = ("q8_0-kv",)
NAMES: tuple[str, ...] = (BASELINE, *CANDIDATES)
MODEL_FAMILY = "smollm2-135m-gguf"
# Context per slot, as the vLLM servers' --max-model-len; four slots serve concurrent requests
# (more queue in the server), which keeps the KV cache at 4 x 4096 tokens (~0.38 GB in f16).
CTX_PER_SLOT = 4096
PARALLEL = 4
# One thread per server: two servers (baseline + one candidate) then share the 2-core host
# without oversubscribing it; docs/local-endpoints.md has the measured speeds.
THREADS = 1

LAUNCHER = Path(__file__).with_name("_llamacpp_server.py")


@dataclass(frozen=True)
class GgufServer:
    weights: str
    """Scheme of the GGUF served: ``f16``, ``q8_0``, ``q4_k_m`` or ``q2_k`` (``models/gguf-<scheme>``)."""
    cache_type: str = "f16"


SERVERS: dict[str, GgufServer] = {
    BASELINE: GgufServer("f16"),
    "q8_0": GgufServer("q8_0"),
    "q4_k_m": GgufServer("q4_k_m"),
    "q2_k": GgufServer("q2_k"),
    "q8_0-kv": GgufServer("f16", cache_type="q8_0"),
}


def validate_candidates(names: Iterable[str]) -> tuple[str, ...]:
    """Known llama.cpp candidate names, de-duplicated in order; raises ``UnknownCandidateError``."""
    out: list[str] = []
    for raw in names:
        name = raw.strip()
        if not name:
            continue
        if name not in CANDIDATES:
            raise UnknownCandidateError(
                f"unknown llama.cpp candidate {name!r} (known: {', '.join(CANDIDATES)})"
            )
        if name not in out:
            out.append(name)
    return tuple(out)


def served_model_name(name: str) -> str:
    return f"{MODEL_FAMILY}-{name}"


def gguf_file(layout: Layout, weights: str) -> Path:
    """The GGUF file of a weights scheme under ``models/gguf-<scheme>/``."""
    return layout.model_dir(f"gguf-{weights}") / f"SmolLM2-135M-Instruct.{weights.upper()}.gguf"


def build_spec(layout: Layout, name: str) -> ServerSpec:
    server = SERVERS[name]
    model = gguf_file(layout, server.weights)
    argv = [
        str(venv_python(layout.llamacpp_venv)),
        str(LAUNCHER),
        str(model),
        "--host",
        HOST,
        "--port",
        PORT_PLACEHOLDER,
        "--alias",
        served_model_name(name),
        "--ctx",
        str(CTX_PER_SLOT),
        "--parallel",
        str(PARALLEL),
        "--threads",
        str(THREADS),
        "--cache-type",
        server.cache_type,
    ]
    launcher_id = "launcher@" + hashlib.sha256(LAUNCHER.read_bytes()).hexdigest()[:12]
    return ServerSpec(
        identity=tuple(launcher_id if a == str(LAUNCHER) else a for a in argv),
        name=name,
        role="baseline" if name == BASELINE else "candidate",
        argv=tuple(argv),
        env={"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": str(THREADS)},
        model_dir=str(model.parent),
        served_model_name=served_model_name(name),
        smoke_test=True,
    )
