"""The llama.cpp engine of evalsvc.local without llama.cpp: its catalog, Q4_K_M and Q2_K type rules and
engine-scoped lifecycle (stand-in servers are real processes on loopback, as in test_local.py).
The real llama.cpp servers are exercised in test_llamacpp_real.py."""

from __future__ import annotations

import dataclasses
import enum
from pathlib import Path

import pytest
from typer.testing import CliRunner

import evalsvc.local as local
from evalsvc.cli.local import app
from evalsvc.local import _core, _gguf_quant, _host, _llamacpp, _prepare, _serve
from evalsvc.local._errors import UnknownCandidateError
from evalsvc.local._paths import Layout
from tests.local.test_local import FAKE_SERVER, home, spec  # noqa: F401  (fixture)


class GQ(enum.Enum):
    """Stand-in for gguf.GGMLQuantizationType (only identity matters to the rules)."""

    Q4_0 = 2
    Q4_K = 12
    Q5_0 = 6
    Q6_K = 14
    Q8_0 = 8
    Q2_K = 10


def test_use_more_bits_matches_llama_cpp_for_30_layers() -> None:
    # n/8 = 3: layers 0-2, 26-29, and every third from 5 on ((i - 3) % 3 == 2).
    more = [i for i in range(30) if _gguf_quant._use_more_bits(i, 30)]
    assert more == [0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 26, 27, 28, 29]


@pytest.mark.parametrize(
    ("name", "n_per_row", "has_output", "expected"),
    [
        ("blk.4.ffn_down.weight", 1536, False, GQ.Q4_K),  # 1536 = 6 x 256: K-quant fits
        ("blk.5.ffn_down.weight", 1536, False, GQ.Q6_K),  # use_more_bits layer
        ("blk.4.attn_q.weight", 576, False, GQ.Q5_0),  # 576 is no multiple of 256: fallback
        ("blk.0.attn_v.weight", 576, False, GQ.Q8_0),  # Q6_K wanted, fallback Q8_0
        ("blk.4.attn_v.weight", 576, False, GQ.Q5_0),
        ("token_embd.weight", 576, False, GQ.Q8_0),  # tied output: Q6_K wanted, fallback
        ("token_embd.weight", 4096, True, GQ.Q4_K),  # with a separate output.weight
        ("output.weight", 4096, True, GQ.Q6_K),
    ],
)
def test_q4_k_m_type_choice(name: str, n_per_row: int, has_output: bool, expected: GQ) -> None:
    assert _gguf_quant.q4_k_m_type(name, n_per_row, 30, has_output, GQ) is expected


@pytest.mark.parametrize(
    ("name", "n_per_row", "expected"),
    [
        ("blk.4.ffn_down.weight", 1536, GQ.Q2_K),  # 1536 = 6 x 256: 2-bit K-quant fits
        ("blk.4.ffn_gate.weight", 576, GQ.Q4_0),  # 576 is no multiple of 256
        ("blk.4.attn_v.weight", 576, GQ.Q4_0),
        ("token_embd.weight", 576, GQ.Q8_0),  # the tied embedding is the output projection too
    ],
)
def test_q2_k_type_choice(name: str, n_per_row: int, expected: GQ) -> None:
    assert _gguf_quant.q2_k_type(name, n_per_row, GQ) is expected


def test_llamacpp_names_known_to_the_host_rules() -> None:
    assert frozenset(_llamacpp.NAMES) == _host.LLAMACPP_NAMES
    assert _host.unsupported_reason("f16", frozenset({"sse2", "avx"})) is not None
    assert _host.unsupported_reason("q8_0-kv", frozenset({"sse2", "avx", "avx2"})) is None
    assert _host.unsupported_reason("f16", frozenset({"asimd"})) is None  # not x86: no rule


def test_llamacpp_spec(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    base = _llamacpp.build_spec(layout, "f16")
    kv = _llamacpp.build_spec(layout, "q8_0-kv")
    q4 = _llamacpp.build_spec(layout, "q4_k_m")
    assert base.role == "baseline" and kv.role == q4.role == "candidate"
    assert base.argv[0] == str(tmp_path / "venvs" / "llamacpp" / "bin" / "python")
    assert base.argv[1].endswith("_llamacpp_server.py")
    # The KV candidate serves the baseline's F16 file; only the cache type differs.
    assert base.argv[2] == kv.argv[2] == str(
        tmp_path / "models" / "gguf-f16" / "SmolLM2-135M-Instruct.F16.gguf"
    )
    assert q4.argv[2].endswith("gguf-q4_k_m/SmolLM2-135M-Instruct.Q4_K_M.gguf")
    q2 = _llamacpp.build_spec(layout, "q2_k")  # the demo's broken candidate: its own GGUF
    assert q2.argv[2].endswith("gguf-q2_k/SmolLM2-135M-Instruct.Q2_K.gguf")
    assert q2.argv[q2.argv.index("--cache-type") + 1] == "f16" and q2.role == "candidate"
    assert base.argv[base.argv.index("--cache-type") + 1] == "f16"
    assert kv.argv[kv.argv.index("--cache-type") + 1] == "q8_0"
    assert base.argv[base.argv.index("--threads") + 1] == "1"
    assert kv.served_model_name == "smollm2-135m-gguf-q8_0-kv"
    assert base.render(9999)[base.argv.index("--port") + 1] == "9999"
    assert base.key() != kv.key()
    # The llama.cpp names never collide with vLLM's: both share one state file.
    assert not set(_llamacpp.NAMES) & {local.BASELINE, *local.CANDIDATES}
    # Each served GGUF is one that the preparation step writes.
    assert {s.weights for s in _llamacpp.SERVERS.values()} == set(_prepare.GGUF_SCHEMES)


def test_unknown_llamacpp_candidate() -> None:
    with pytest.raises(UnknownCandidateError, match="unknown llama.cpp candidate 'fp8-kv'"):
        local.ensure_up(["fp8-kv"], engine="llamacpp")
    with pytest.raises(UnknownCandidateError, match="unknown engine 'tgi'"):
        local.ensure_up(engine="tgi")
    result = CliRunner().invoke(app, ["up", "--engine", "llamacpp", "-c", "w8a8", "--json"])
    assert result.exit_code == 2 and result.stdout == ""
    assert "unknown llama.cpp candidate 'w8a8'" in result.stderr


@pytest.fixture
def fake_llamacpp(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stand-ins for both engines' servers, no real preparation."""

    class NoPrepare:
        def __init__(self, layout: Layout) -> None:
            pass

        def models(self, names: object) -> None:
            pass

        def gguf_models(self, names: object) -> None:
            list(names)  # type: ignore[call-overload]

    def build(layout: Layout, name: str, **_: object) -> _serve.ServerSpec:
        return dataclasses.replace(spec(name, FAKE_SERVER), served_model_name=f"fake-{name}")

    monkeypatch.setattr(_core, "Preparer", NoPrepare)
    monkeypatch.setattr(_core, "build_spec", build)
    monkeypatch.setattr(_core.llamacpp, "build_spec", build)
    monkeypatch.setattr(_core, "unsupported_reason", lambda name: None)


def test_engines_share_the_state_and_stop_separately(
    home: Layout,  # noqa: F811
    fake_llamacpp: None,
) -> None:
    runner = CliRunner()
    up = runner.invoke(app, ["up", "--engine", "llamacpp", "-c", "q4_k_m", "--json"])
    assert up.exit_code == 0, up.stderr
    assert "baseline f16:" in up.stderr
    local.ensure_up(["w8a8"], timeout=300)  # a vLLM pair beside it
    infos = {i.name: i for i in local.server_info()}
    assert {n: i.engine for n, i in infos.items()} == {
        "bf16": "vllm",
        "w8a8": "vllm",
        "f16": "llamacpp",
        "q4_k_m": "llamacpp",
    }
    llama = local.status("llamacpp")
    assert llama is not None and list(llama.candidates) == ["q4_k_m"]
    assert llama.baseline == infos["f16"].url
    vllm = local.status()
    assert vllm is not None and list(vllm.candidates) == ["w8a8"]

    down = runner.invoke(app, ["down", "--engine", "llamacpp"])
    assert down.exit_code == 0
    assert not _serve.pid_alive(infos["f16"].pid) and not _serve.pid_alive(infos["q4_k_m"].pid)
    assert {i.name for i in local.server_info()} == {"bf16", "w8a8"}
    assert _serve.pid_alive(infos["bf16"].pid)
    status = runner.invoke(app, ["status", "--engine", "llamacpp", "--json"])
    assert status.exit_code == 1 and "local up --engine llamacpp" in status.stderr
    assert runner.invoke(app, ["down"]).exit_code == 0
    assert local.server_info() == []
