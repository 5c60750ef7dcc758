"""lm-eval with the serving engine's own tokenizer: run as a script by lm-eval's Python.

``register()`` registers one lm-eval model, ``evalsvc-engine-completions`` (the run script,
``_lmeval_run.py``, calls it before lm-eval builds the model); ``python _lmeval_engine.py
<lm_eval arguments>`` runs lm-eval's command line (``lm_eval.__main__``) with it, by hand. The
model is lm-eval's ``local-completions`` whose tokenizer is the endpoint's ``POST /tokenize``
(vLLM's shape, which SGLang shares: ``{"prompt", "add_special_tokens": false}`` →
``{"tokens": [...]}``), so a loglikelihood task needs no tokenizer files on this machine and no
hub: the ids are the ones the engine itself uses, and the requests are sent as those ids.

Why not lm-eval's own ``tokenizer_backend=remote``: it first asks ``GET /tokenizer_info``, a
route vLLM serves only with ``--enable-tokenizer-info-endpoint`` and SGLang not at all, and
without it lm-eval falls back to downloading a Hugging Face tokenizer. ``/tokenize`` is what the
evalsvc probe found (``capabilities.tokenize``).

Contract: this file never imports evalsvc (lm-eval's Python may be another environment, the
managed venv); it reads the endpoint's key from ``OPENAI_API_KEY`` as lm-eval does, talks only
to the server root of the ``base_url`` lm-eval is given, and caches each text's ids (lm-eval
encodes a context once per choice). A document whose context is empty (loglikelihood_rolling
tasks) needs a BOS/EOS id this route does not give: such tasks need a local tokenizer
(``params.tokenizer``).
"""

from __future__ import annotations

import functools
import json
import os
import sys
import urllib.request
from typing import Any

MODEL_NAME = "evalsvc-engine-completions"


class EngineTokenizer:
    """``encode`` through the engine's ``/tokenize``; the parts of a tokenizer lm-eval's API
    models read (``encode``, ``encode_batch``, ``__call__``, special-token ids: none known)."""

    eos_token: str | None = None
    bos_token: str | None = None
    eos_token_id: int | None = None
    bos_token_id: int | None = None
    eot_token: int | None = None

    def __init__(self, base_url: str, model: str | None, timeout: float = 60.0) -> None:
        root = base_url.rstrip("/")
        for route in ("/chat/completions", "/completions"):  # the longer first
            if root.endswith(route):
                root = root[: -len(route)]
                break
        if root.endswith("/v1"):
            root = root[: -len("/v1")]
        self.url = f"{root}/tokenize"
        self.model = model
        self.timeout = timeout
        key = os.environ.get("OPENAI_API_KEY")
        self.headers = {"Content-Type": "application/json"}
        if key:
            self.headers["Authorization"] = f"Bearer {key}"
        self.encode = functools.lru_cache(maxsize=65536)(self._encode)  # type: ignore[method-assign]

    def _encode(self, text: str) -> list[int]:
        body: dict[str, Any] = {"prompt": text, "add_special_tokens": False}
        if self.model:
            body["model"] = self.model
        request = urllib.request.Request(
            self.url, data=json.dumps(body).encode(), headers=self.headers, method="POST"
        )
        last: Exception | None = None
        for _ in range(3):
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
                    tokens = json.loads(response.read()).get("tokens")
                break
            except (OSError, ValueError) as exc:  # URLError is an OSError
                last = exc
        else:
            raise RuntimeError(f"POST {self.url} failed: {type(last).__name__}: {last}")
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise RuntimeError(f"POST {self.url} answered without a list of token ids")
        return list(tokens)

    def encode(self, text: str) -> list[int]:  # replaced by the cached call in __init__
        return self._encode(text)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def __call__(self, text: str | list[str], **_: Any) -> dict[str, Any]:
        ids = self.encode_batch(text) if isinstance(text, list) else self.encode(text)
        return {"input_ids": ids}

    def decode(self, tokens: list[int]) -> str:
        raise RuntimeError("the engine tokenizer only encodes (requests are sent as token ids)")

    def batch_decode(self, tokens: list[list[int]]) -> list[str]:
        return [self.decode(t) for t in tokens]


def register() -> None:
    """Register ``evalsvc-engine-completions`` with lm-eval's model registry."""
    from lm_eval.api.registry import register_model  # type: ignore[import-not-found]
    from lm_eval.models.openai_completions import (  # type: ignore[import-not-found]
        LocalCompletionsAPI,
    )

    @register_model(MODEL_NAME)
    class EngineCompletions(LocalCompletionsAPI):  # type: ignore[misc]
        def __init__(self, **kwargs: Any) -> None:
            # No tokenizer is loaded (none of lm-eval's backends is asked); then the engine's.
            kwargs.pop("tokenizer", None)
            kwargs["tokenizer_backend"] = "none"
            super().__init__(**kwargs)
            self.tokenizer = EngineTokenizer(str(kwargs.get("base_url") or ""), self.model)
            # lm-eval's "remote" branch encodes with ``tokenizer.encode``; the requests go out
            # as the engine's own ids, so nothing is decoded.
            self.tokenizer_backend = "remote"
            self.tokenized_requests = True


def main() -> None:
    register()
    from lm_eval.__main__ import cli_evaluate  # type: ignore[import-not-found]

    sys.argv[0] = "lm_eval"
    cli_evaluate()


if __name__ == "__main__":
    main()
