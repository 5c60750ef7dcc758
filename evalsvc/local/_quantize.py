"""bf16 checkpoint → compressed-tensors W8A8 / W4A16, run as a path by the managed quant venv.

Usage: ``python _quantize.py {w8a8,w4a16,w4a16-qdq} BF16_DIR OUT_DIR``.

Contract: round-to-nearest, data-free quantization of every Linear layer except ``lm_head`` with
llm-compressor's ``QuantizationModifier``; saves a compressed checkpoint plus the tokenizer files
and ``chat_template.jinja`` into OUT_DIR (which the caller renames into place).
- ``w8a8``: int8 weights per channel, dynamic per-token int8 activations (the ``W8A8`` preset).
- ``w4a16``: 4-bit int weights, symmetric, groups of 64 (the preset's 128 does not divide the
  576-wide hidden size of SmolLM2-135M).
- ``w4a16-qdq``: the ``w4a16`` weights quantized then dequantized back to bf16 and saved as a
  plain bf16 checkpoint (no quantization_config), for CPUs whose vLLM build lacks the W4A16
  kernel: the kernel dequantizes the same way, so outputs drift as the real candidate's do.
Imports torch/transformers/llmcompressor only inside ``main``.
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import sys
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if not p or Path(p).resolve() != _HERE]

W4A16_GROUP_SIZE = 64
_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "vocab.json",
    "merges.txt",
    "generation_config.json",
)


def _recipe(scheme: str) -> Any:
    modifiers: Any = importlib.import_module("llmcompressor.modifiers.quantization")
    scheme = scheme.removesuffix("-qdq")
    if scheme == "w8a8":
        return modifiers.QuantizationModifier(targets="Linear", scheme="W8A8", ignore=["lm_head"])
    group = {
        "targets": ["Linear"],
        "weights": {
            "num_bits": 4,
            "type": "int",
            "symmetric": True,
            "strategy": "group",
            "group_size": W4A16_GROUP_SIZE,
        },
    }
    return modifiers.QuantizationModifier(config_groups={"group_0": group}, ignore=["lm_head"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("scheme", choices=("w8a8", "w4a16", "w4a16-qdq"))
    parser.add_argument("src", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    src: Path = args.src.resolve()
    out: Path = args.out.resolve()

    torch: Any = importlib.import_module("torch")
    transformers: Any = importlib.import_module("transformers")
    llmcompressor: Any = importlib.import_module("llmcompressor")

    model = transformers.AutoModelForCausalLM.from_pretrained(str(src), dtype=torch.bfloat16)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(src))
    llmcompressor.oneshot(model=model, recipe=_recipe(args.scheme))
    out.mkdir(parents=True, exist_ok=True)
    if args.scheme.endswith("-qdq"):
        dense = transformers.AutoModelForCausalLM.from_pretrained(str(src), dtype=torch.bfloat16)
        _copy_fake_quantized(model, dense, torch)
        dense.save_pretrained(str(out))
    else:
        model.save_pretrained(str(out), save_compressed=True)
    tokenizer.save_pretrained(str(out))
    # Copy the source's files verbatim where they exist, so the template is byte-identical.
    for name in _TOKENIZER_FILES:
        if (src / name).exists():
            shutil.copy2(src / name, out / name)
    if not (out / "chat_template.jinja").exists():
        print("error: no chat_template.jinja in the output", file=sys.stderr)
        return 1
    print(f"saved {out}: {sorted(p.name for p in out.iterdir())}", flush=True)
    return 0


def _copy_fake_quantized(quantized: Any, dense: Any, torch: Any) -> None:
    """Copy ``dequantize(quantize(W))`` of each calibrated Linear into ``dense``."""
    forward: Any = importlib.import_module("compressed_tensors.quantization.lifecycle.forward")
    count = 0
    with torch.no_grad():
        for name, module in quantized.named_modules():
            scheme = getattr(module, "quantization_scheme", None)
            scale = getattr(module, "weight_scale", None)
            if scheme is None or scheme.weights is None or scale is None:
                continue
            zero_point = getattr(module, "weight_zero_point", None)
            fq = forward.fake_quantize(module.weight, scale, zero_point, scheme.weights)
            target = dense.get_submodule(name).weight
            target.copy_(fq.to(target.dtype))
            # Sanity: a 4-bit group holds at most 16 distinct values.
            group = target[0, :W4A16_GROUP_SIZE]
            if torch.unique(group).numel() > 16:
                raise RuntimeError(f"{name}: fake quantization left more than 16 levels")
            count += 1
    if count == 0:
        raise RuntimeError("no quantized Linear layer found after oneshot")
    print(f"fake-quantized {count} Linear layers", flush=True)


if __name__ == "__main__":
    sys.exit(main())
