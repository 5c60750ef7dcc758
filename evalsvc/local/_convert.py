"""GGUF → bf16 Hugging Face checkpoint, run as a path by the managed vllm venv's interpreter.

Usage: ``python _convert.py GGUF_FILE OUT_DIR``.

Contract: writes a dequantized bf16 safetensors checkpoint, its tokenizer and chat template to
OUT_DIR (which the caller renames into place); exits non-zero if the chat template is missing or
the weights are not bf16. Imports torch/transformers only inside ``main``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if not p or Path(p).resolve() != _HERE]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("gguf", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    gguf: Path = args.gguf.resolve()
    out: Path = args.out.resolve()

    torch: Any = importlib.import_module("torch")
    transformers: Any = importlib.import_module("transformers")
    kwargs: dict[str, Any] = {"gguf_file": gguf.name, "dtype": torch.bfloat16}
    # transformers 5.x keeps GGUF blocks quantized unless told to dequantize; vLLM needs dense.
    gguf_config = getattr(transformers, "GgufConfig", None)
    if gguf_config is not None:
        kwargs["quantization_config"] = gguf_config(gguf_file=gguf.name, dequantize=True)
    print(f"loading {gguf}", flush=True)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(gguf.parent), **kwargs)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    dtypes = {str(p.dtype) for p in model.parameters()}
    print(f"parameter dtypes: {sorted(dtypes)}", flush=True)
    if dtypes != {"torch.bfloat16"}:
        print("error: the converted weights are not all bf16", file=sys.stderr)
        return 1
    if not getattr(tokenizer, "chat_template", None):
        print("error: the GGUF tokenizer carries no chat template", file=sys.stderr)
        return 1

    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    _drop_gguf_quantization_config(out / "config.json")
    if not (out / "chat_template.jinja").exists():
        # Older transformers keep it in tokenizer_config.json only; vLLM reads either, but the
        # quantized checkpoints copy this file, so always write it.
        (out / "chat_template.jinja").write_text(tokenizer.chat_template, encoding="utf-8")
    print(f"saved {out}: {sorted(p.name for p in out.iterdir())}", flush=True)
    return 0


def _drop_gguf_quantization_config(config_path: Path) -> None:
    """The weights are dense now; a leftover GGUF quantization_config would mislead vLLM."""
    config = json.loads(config_path.read_text(encoding="utf-8"))
    qc = config.get("quantization_config")
    if isinstance(qc, dict) and str(qc.get("quant_method", "")).lower() == "gguf":
        del config["quantization_config"]
        config_path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        print("removed the GGUF quantization_config from config.json", flush=True)


if __name__ == "__main__":
    sys.exit(main())
