"""llama.cpp server launcher, run as a *path* by the managed llamacpp venv's python.

Usage: ``<venv>/bin/python _llamacpp_server.py GGUF --port P [--host H] [--alias NAME]
[--ctx N] [--parallel N] [--threads N] [--cache-type {f16,q8_0}]``.

Contract: starts llama.cpp's own HTTP server (the C++ ``server_context`` of ``tools/server``,
embedded in the PyPI ``xllamacpp`` wheel; OpenAI routes, ``/health``, ``/tokenize``,
``/metrics``) on HOST:PORT with the GGUF, then blocks until SIGTERM/SIGINT and exits 0. A
``--cache-type`` other than f16 quantizes both K and V caches; flash attention is always on so
that the baseline and the KV candidate differ only in the cache type (llama.cpp needs flash
attention for a quantized V cache). Standard library only at import time.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import threading
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if not p or Path(p).resolve() != _HERE]

CACHE_TYPES = ("f16", "q8_0")


def build_params(xlc: Any, args: argparse.Namespace) -> Any:
    params = xlc.CommonParams()
    params.model.path = str(args.gguf)
    params.hostnames = [args.host]
    params.port = args.port
    if args.alias:
        params.model_alias = {args.alias}
    params.n_ctx = args.ctx * args.parallel  # llama.cpp splits n_ctx between the slots
    params.n_parallel = args.parallel
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.endpoint_metrics = True
    params.flash_attn_type = xlc.llama_flash_attn_type.LLAMA_FLASH_ATTN_TYPE_ENABLED
    cache = getattr(xlc.ggml_type, f"GGML_TYPE_{args.cache_type.upper()}")
    params.cache_type_k = cache
    params.cache_type_v = cache
    return params


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("gguf", type=Path)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--alias", default="")
    parser.add_argument("--ctx", type=int, default=4096, help="context per slot (tokens)")
    parser.add_argument("--parallel", type=int, default=4, help="concurrent slots")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cache-type", choices=CACHE_TYPES, default="f16")
    args = parser.parse_args()

    xlc: Any = importlib.import_module("xllamacpp")
    print(f"llama.cpp system info: {xlc.get_system_info()}", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    server = xlc.Server(build_params(xlc, args))  # starts the HTTP server's threads
    print(f"listening on {server.listening_address}", flush=True)
    while not stop.wait(1.0):
        pass
    del server  # the destructor stops the HTTP server and frees the model
    print("stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
