"""The tokenizer lm-eval uses when nothing is local (``_lmeval_engine.EngineTokenizer``): the
engine's own ``POST /tokenize``, asked of the server root of the completions URL lm-eval is
given, with the endpoint's key, each text once. Against the loopback stub shaped like vLLM and
like SGLang (``benchmarks/stub_server.py``: one id per character); lm-eval itself is not needed
(``tests/cli/test_gpu_set.py`` runs it where it is installed)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalsvc.suites.kinds import _lmeval_engine
from evalsvc.suites.kinds._lmeval_engine import EngineTokenizer

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", params=["vllm", "sglang"])
def base_url(request: pytest.FixtureRequest) -> Iterator[str]:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import evaluator_speed
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    with evaluator_speed.stub("--engine", request.param) as urls:
        yield urls[0]


def test_ids_come_from_the_engines_route_once_per_text(base_url: str) -> None:
    tok = EngineTokenizer(f"{base_url}/completions", "stub-model")
    assert tok.url == base_url.removesuffix("/v1") + "/tokenize"
    text = "Question: 2 + 2?\nAnswer: 4"
    ids = tok.encode(text)
    assert ids == [ord(c) % 50000 for c in text]  # the stub's tokenizer
    assert tok.encode(text) == ids and tok.encode.cache_info().hits == 1  # type: ignore[attr-defined]
    assert tok(["a", "bc"]) == {"input_ids": [[97], [98, 99]]}
    assert tok.eos_token_id is None and tok.bos_token_id is None  # the route gives none


def test_a_server_without_the_route_fails_with_the_url(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import evaluator_speed
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    with evaluator_speed.stub("--engine", "openai") as urls:
        tok = EngineTokenizer(f"{urls[0]}/chat/completions", None)
        with pytest.raises(RuntimeError, match=r"POST http://127\.0\.0\.1:\d+/tokenize failed"):
            tok.encode("hello")


def test_the_script_never_imports_evalsvc() -> None:
    """lm-eval's Python may be another environment (the managed venv) without evalsvc."""
    source = Path(_lmeval_engine.__file__).read_text(encoding="utf-8")
    assert "import evalsvc" not in source and "from evalsvc" not in source
