"""What each serving engine exposes beyond the OpenAI routes, and how to read it.

Contract: pure descriptions (no I/O) of the engines evalsvc knows — vLLM, llama.cpp's
``llama-server``, SGLang and Hugging Face TGI — plus a generic OpenAI-compatible server:

- how the engine names itself in ``/v1/models`` (``owned_by``), and which of its own info routes
  identify it when that name is missing or generic;
- the shape of its tokenizer route (request body and answer), so that suites that size prompts
  in tokens work on every engine that has one;
- which facts (max context, version, checkpoint, KV-cache dtype, quantization) its info routes
  carry, under which keys.

The probe (``_probe.py``) does the requests; the client's ``tokenize`` uses :func:`tokenize_request`
and :func:`parse_tokens`. Shapes, as documented by each project:

- vLLM: ``POST /tokenize {"prompt", "add_special_tokens"}`` → ``{"tokens": [ids]}``;
  ``GET /version``; KV facts from ``/metrics`` (``vllm:cache_config_info``).
- SGLang: ``POST /tokenize`` in vLLM's shape; ``GET /get_model_info`` → ``{"model_path", ...}``;
  ``GET /get_server_info`` (newer: ``/server_info``) → server arguments (``context_length``,
  ``kv_cache_dtype``, ``quantization``) and ``version``.
- llama.cpp: ``POST /tokenize {"content", "add_special"}`` → ``{"tokens": [ids]}`` (or pieces
  ``{"id", "piece"}``); ``GET /props`` → ``default_generation_settings.n_ctx``, ``model_path``,
  ``build_info``.
- TGI: ``POST /tokenize {"inputs"}`` → ``[{"id", "text", "start", "stop"}]``; ``GET /info`` →
  ``model_id``, ``model_sha``, ``model_dtype``, ``max_total_tokens``, ``version``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "ENGINES",
    "EngineFacts",
    "TokenizeShape",
    "engine_from_owner",
    "facts_from_info",
    "parse_tokens",
    "tokenize_request",
]

TokenizeShape = Literal["vllm", "llama.cpp", "tgi"]


@dataclass(frozen=True)
class Engine:
    """One engine: its name, its ``owned_by`` spellings, its info routes and tokenizer shape."""

    name: str
    owners: tuple[str, ...]
    info_routes: tuple[str, ...]
    """Routes under the server root, in the order the probe asks them."""
    tokenize: TokenizeShape | None
    """The shape of ``POST /tokenize``; ``None`` when the engine has none."""


#: Known engines, in the order the probe tries their info routes when ``owned_by`` says nothing
#: (each route is distinctive: ``/props`` is llama.cpp's, ``/get_model_info`` SGLang's, ``/info``
#: TGI's; vLLM is recognised by ``/version`` plus its metrics).
ENGINES: dict[str, Engine] = {
    "llama.cpp": Engine("llama.cpp", ("llamacpp", "llama.cpp"), ("/props",), "llama.cpp"),
    "sglang": Engine(
        "sglang", ("sglang",), ("/get_model_info", "/get_server_info", "/server_info"), "vllm"
    ),
    "tgi": Engine("tgi", ("tgi", "text-generation-inference"), ("/info",), "tgi"),
    "vllm": Engine("vllm", ("vllm",), ("/version",), "vllm"),
}


def engine_from_owner(owned_by: Any) -> str | None:
    """The engine an ``owned_by`` value names, or ``None`` (``"system"``, ``"openai"``...)."""
    if not isinstance(owned_by, str):
        return None
    low = owned_by.strip().lower()
    for engine in ENGINES.values():
        if low in engine.owners:
            return engine.name
    return None


@dataclass
class EngineFacts:
    """What one engine's info routes said (every field optional)."""

    engine: str
    version: str | None = None
    max_context: int | None = None
    root: str | None = None
    kv_cache_dtype: str | None = None
    quantization: str | None = None
    dtype: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _int(value: Any) -> int | None:
    try:
        return None if value in (None, "", "None") or isinstance(value, bool) else int(value)
    except (TypeError, ValueError):
        return None


def _str(value: Any, limit: int = 256) -> str | None:
    # Engine text lands in reports and pages: keep it short (escaping is the views' job).
    return str(value)[:limit] if isinstance(value, (str, int, float)) and str(value) else None


#: The sampling defaults of llama.cpp's ``/props`` that change an answer (its other ``params``
#: are per-slot state or server limits).
GENERATION_KEYS = (
    "temperature", "top_k", "top_p", "min_p", "typical_p", "repeat_penalty", "repeat_last_n",
    "presence_penalty", "frequency_penalty", "dry_multiplier", "xtc_probability", "mirostat",
)


def facts_from_info(route: str, data: Any) -> EngineFacts | None:
    """Recognise an engine from one info route's JSON answer; ``None`` if it is not that shape."""
    if not isinstance(data, dict):
        return None
    if route == "/props" and ("default_generation_settings" in data or "build_info" in data):
        settings = data.get("default_generation_settings")
        n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
        # The sampling defaults: under ``params`` in current llama-server, at the top of the
        # settings in older ones. The template is kept whole for its hash (the probe's
        # fallback when /apply-template is missing), never stored.
        params = settings.get("params") if isinstance(settings, dict) else None
        source = params if isinstance(params, dict) else settings if isinstance(settings, dict) else {}
        defaults = {
            k: source[k] for k in GENERATION_KEYS
            if isinstance(source.get(k), int | float) and not isinstance(source.get(k), bool)
        }
        extra: dict[str, Any] = {"generation_defaults": defaults or None}
        if isinstance(data.get("chat_template"), str):
            extra["chat_template"] = data["chat_template"]
        return EngineFacts(
            engine="llama.cpp",
            version=_str(data.get("build_info")),
            max_context=_int(n_ctx if n_ctx is not None else data.get("n_ctx")),
            root=_str(data.get("model_path")),
            extra=extra,
        )
    if route == "/get_model_info" and "model_path" in data:
        return EngineFacts(engine="sglang", root=_str(data.get("model_path")))
    if route in ("/get_server_info", "/server_info") and (
        "context_length" in data or "kv_cache_dtype" in data or "model_path" in data
    ):
        kv = _str(data.get("kv_cache_dtype"))
        quant = _str(data.get("quantization"))
        return EngineFacts(
            engine="sglang",
            version=_str(data.get("version")),
            max_context=_int(data.get("context_length")),
            root=_str(data.get("model_path")),
            kv_cache_dtype=None if kv in (None, "auto") else kv,
            quantization=None if quant in (None, "None") else quant,
        )
    if route == "/info" and "model_id" in data and (
        "max_total_tokens" in data or "max_input_tokens" in data or "max_input_length" in data
    ):
        return EngineFacts(
            engine="tgi",
            version=_str(data.get("version")),
            max_context=_int(data.get("max_total_tokens")),
            root=_str(data.get("model_id")),
            dtype=_str(data.get("model_dtype")),
            extra={"model_sha": _str(data.get("model_sha"))},
        )
    if route == "/version" and isinstance(data.get("version"), str):
        return EngineFacts(engine="vllm", version=_str(data["version"]))
    return None


def tokenize_request(shape: TokenizeShape, text: str, model: str | None) -> dict[str, Any]:
    """The body of ``POST /tokenize`` in ``shape`` (no special tokens where the engine allows)."""
    if shape == "llama.cpp":
        return {"content": text, "add_special": False}
    if shape == "tgi":
        # TGI's route takes a generate request; it has no switch for special tokens.
        return {"inputs": text}
    body: dict[str, Any] = {"prompt": text, "add_special_tokens": False}
    if model:
        body["model"] = model
    return body


def parse_tokens(shape: TokenizeShape, data: Any) -> list[int] | None:
    """Token ids from a ``/tokenize`` answer in ``shape``; ``None`` when it is not that shape."""
    if shape == "tgi":
        if isinstance(data, list) and all(isinstance(t, dict) and "id" in t for t in data):
            return [int(t["id"]) for t in data]
        return None
    if not isinstance(data, dict) or not isinstance(data.get("tokens"), list):
        return None
    out: list[int] = []
    for tok in data["tokens"]:
        if isinstance(tok, dict) and "id" in tok:  # llama.cpp with_pieces
            out.append(int(tok["id"]))
        elif isinstance(tok, int) and not isinstance(tok, bool):
            out.append(tok)
        else:
            return None
    return out
