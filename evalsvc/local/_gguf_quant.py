"""GGUF → F16 / Q8_0 / Q4_K_M / Q2_K GGUF, run as a path by the managed llamacpp venv's interpreter.

Usage: ``python _gguf_quant.py {f16,q8_0,q4_k_m,q2_k} SRC_GGUF OUT_GGUF``.

Contract: every tensor of SRC is dequantized to float32 with the ``gguf`` package and written to
OUT in the target type; all metadata (tokenizer, chat template, hyper-parameters) is copied, only
``general.file_type`` changes. 1-D tensors (norms) stay F32, as llama.cpp's quantizer keeps them.
The quantized blocks come from llama.cpp itself: ``ggml_quantize_chunk`` exported by the PyPI
``xllamacpp`` build (the same reference quantizers that ``llama-quantize`` calls), through ctypes.
``q4_k_m`` follows llama.cpp's per-tensor type choice for ``LLAMA_FTYPE_MOSTLY_Q4_K_M``, including
its fallbacks for rows that are not a multiple of 256 (SmolLM2-135M's width is 576).
``q2_k`` is the demo's candidate that breaks, and is no llama.cpp mixture: Q2_K (2-bit K-quant,
2.625 bits a weight) on every matrix whose rows hold whole 256-weight super-blocks (this model's
FFN down-projections, 1536 wide), Q4_0 on the 576-wide ones (K-quants need rows of 256; llama.cpp's
own ``Q2_K`` file type would put IQ4_NL there and Q3_K on the down-projections), and Q8_0 on the
tied embedding. Small models do not survive 2-bit weights: SmolLM2-135M's answers become fluent
nonsense or loops (docs/local-endpoints.md has the measured accuracy).
Exits non-zero on any failure; imports numpy/gguf/xllamacpp only inside ``main``.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib
import sys
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if not p or Path(p).resolve() != _HERE]

SCHEMES = ("f16", "q8_0", "q4_k_m", "q2_k")
QK_K = 256  # super-block size of the K-quants (ggml-common.h)


def _use_more_bits(i_layer: int, n_layers: int) -> bool:
    # llama.cpp src/llama-quant.cpp, use_more_bits(): the first and last eighth of the layers and
    # every third one in between get the larger type in the *_M mixtures.
    return (
        i_layer < n_layers // 8
        or i_layer >= 7 * n_layers // 8
        or (i_layer - n_layers // 8) % 3 == 2
    )


def q4_k_m_type(name: str, n_per_row: int, n_layers: int, has_output: bool, gq: Any) -> Any:
    """The type llama.cpp's ``llama_tensor_get_type`` picks for Q4_K_M (dense Llama models)."""
    t = gq.Q4_K
    layer = int(name.split(".")[1]) if name.startswith("blk.") else -1
    if name == "output.weight" or (not has_output and name == "token_embd.weight"):
        t = gq.Q6_K  # the output projection (the tied embedding when there is none)
    elif name.endswith(("attn_v.weight", "ffn_down.weight")) and _use_more_bits(layer, n_layers):
        t = gq.Q6_K
    if n_per_row % QK_K != 0:
        # llama-quant.cpp: rows that are not a multiple of 256 cannot hold K-quant super-blocks;
        # the quantizer falls back to the legacy type of about the same size.
        t = {gq.Q4_K: gq.Q5_0, gq.Q6_K: gq.Q8_0}[t]
    return t


def q2_k_type(name: str, n_per_row: int, gq: Any) -> Any:
    """The type of a matrix in the ``q2_k`` scheme (module docstring): 2-bit where it fits."""
    if name == "token_embd.weight":
        return gq.Q8_0  # the tied embedding is also the output projection
    return gq.Q2_K if n_per_row % QK_K == 0 else gq.Q4_0


class _Ggml:
    """``ggml_quantize_chunk`` from the xllamacpp extension module (llama.cpp's quantizers)."""

    def __init__(self) -> None:
        ext: Any = importlib.import_module("xllamacpp.xllamacpp")
        lib = ctypes.CDLL(ext.__file__)
        fn = lib.ggml_quantize_chunk
        # size_t ggml_quantize_chunk(enum ggml_type, const float *src, void *dst, int64_t start,
        #                            int64_t nrows, int64_t n_per_row, const float *imatrix)
        fn.restype = ctypes.c_size_t
        fn.argtypes = [
            ctypes.c_int,
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_int64,
            ctypes.c_int64,
            ctypes.c_int64,
            ctypes.c_void_p,
        ]
        self._fn = fn

    def quantize(self, np: Any, rows: Any, qtype: Any, type_size: int, block: int) -> Any:
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        nrows, n_per_row = rows.shape
        row_bytes = n_per_row // block * type_size
        out = np.empty((nrows, row_bytes), dtype=np.uint8)
        written = self._fn(
            int(qtype), rows.ctypes.data, out.ctypes.data, 0, nrows, n_per_row, None
        )
        if written != out.nbytes:
            raise RuntimeError(f"ggml_quantize_chunk wrote {written} bytes, expected {out.nbytes}")
        return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("scheme", choices=SCHEMES)
    parser.add_argument("src", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()

    np: Any = importlib.import_module("numpy")
    gguf: Any = importlib.import_module("gguf")
    quants: Any = importlib.import_module("gguf.quants")
    gq = gguf.GGMLQuantizationType

    reader = gguf.GGUFReader(str(args.src))
    arch = str(reader.fields["general.architecture"].contents())
    n_layers = int(reader.fields[f"{arch}.block_count"].contents())
    names = {t.name for t in reader.tensors}
    has_output = "output.weight" in names
    file_type = {
        "f16": gguf.LlamaFileType.MOSTLY_F16,
        "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
        "q4_k_m": gguf.LlamaFileType.MOSTLY_Q4_K_M,
        "q2_k": gguf.LlamaFileType.MOSTLY_Q2_K,
    }[args.scheme]

    writer = gguf.GGUFWriter(str(args.out), arch)
    for key, field in reader.fields.items():
        # GGUF.* are the header's own counts; the writer adds architecture itself.
        if key.startswith("GGUF.") or key in ("general.architecture", "general.file_type"):
            continue
        sub = field.types[1] if len(field.types) > 1 else None
        writer.add_key_value(key, field.contents(), field.types[0], sub_type=sub)
    writer.add_file_type(int(file_type))

    ggml = _Ggml() if args.scheme != "f16" else None
    counts: dict[str, int] = {}
    for tensor in reader.tensors:
        dense = quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
        if dense.ndim == 1:
            target = gq.F32
        elif args.scheme == "f16":
            target = gq.F16
        elif args.scheme == "q8_0":
            target = gq.Q8_0
        elif args.scheme == "q2_k":
            target = q2_k_type(tensor.name, dense.shape[-1], gq)
        else:
            target = q4_k_m_type(tensor.name, dense.shape[-1], n_layers, has_output, gq)
        if target == gq.F32:
            writer.add_tensor(tensor.name, dense)
        elif target == gq.F16:
            writer.add_tensor(tensor.name, dense.astype(np.float16))
        else:
            assert ggml is not None
            block, type_size = gguf.GGML_QUANT_SIZES[target]
            rows = dense.reshape(-1, dense.shape[-1])
            data = ggml.quantize(np, rows, target, type_size, block)
            writer.add_tensor(tensor.name, data, raw_dtype=target)
        counts[target.name] = counts.get(target.name, 0) + 1

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    types = dict(sorted(counts.items()))
    print(f"wrote {args.out} ({args.scheme}): tensor types {types}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
