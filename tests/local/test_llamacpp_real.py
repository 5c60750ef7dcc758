"""The llama.cpp local engine for real: its prepared GGUFs, its servers, and the catalog on them.

Runs in ``make test`` on any x86-64 host (no AVX-512 gate: llama.cpp's CPU build is fast enough
here; the cost is measured in docs/local-endpoints.md). The first session prepares the managed
venv and the GGUFs under EVALSVC_HOME (minutes); later ones find the completion markers.
Servers: the ``f16`` baseline and the ``q8_0-kv`` candidate (tests/conftest.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

import evalsvc.local as local
from evalsvc.domain import EndpointRef, RunOptions, Sample
from evalsvc.endpoints import OPTIONAL_CAPABILITIES
from evalsvc.local import _llamacpp
from evalsvc.local._errors import LocalError
from evalsvc.local._llamacpp import gguf_file
from evalsvc.local._paths import Layout, venv_python
from evalsvc.local._serve import ensure_running
from evalsvc.local._state import load_state
from evalsvc.runner import CapabilityError, execute
from evalsvc.runner._runner import check_capabilities, probe_all
from evalsvc.suites import Suite, SuiteSpec, suite_kinds
from evalsvc.suites._registry import catalog

pytestmark = [pytest.mark.llamacpp, pytest.mark.timeout(1800)]

DOCS = Path(__file__).resolve().parents[2] / "docs" / "local-endpoints.md"

# Run in the llamacpp venv (evalsvc itself does not depend on gguf/numpy for this): the tensor
# types of a GGUF, its file type and chat template, and the relative RMS error of its weights
# against the F16 file's (the F16 file holds the source's dequantized values exactly), over the
# 2-D tensors of layers 0 and 4 (every type of the Q4_K_M mixture is there; gguf's Python
# K-quant dequantizer takes minutes for the whole file).
INSPECT = r"""
import json, sys
from collections import Counter
import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize
ref = GGUFReader(sys.argv[1])  # reading a GGUF's 49k-token vocabulary takes seconds: once each
ref_t = {t.name: t for t in ref.tensors}
ref_keys = sorted(k for k in ref.fields if not k.startswith("GGUF."))
out = {}
for path in sys.argv[1:]:
    r = ref if path == sys.argv[1] else GGUFReader(path)
    num = den = 0.0
    for t in r.tensors:
        if len(t.shape) < 2 or not t.name.startswith(("blk.0.", "blk.4.")):
            continue
        a = dequantize(t.data, t.tensor_type).astype(np.float64)
        b = dequantize(ref_t[t.name].data, ref_t[t.name].tensor_type).astype(np.float64)
        num += float(((a - b) ** 2).sum()); den += float((b ** 2).sum())
    out[path] = {
        "types": dict(Counter(t.tensor_type.name for t in r.tensors)),
        "file_type": int(r.fields["general.file_type"].contents()),
        "template": r.fields["tokenizer.chat_template"].contents(),
        "same_keys": sorted(k for k in r.fields if not k.startswith("GGUF.")) == ref_keys,
        "rel_rms": (num / den) ** 0.5,
    }
print(json.dumps(out))
"""


def inspect(layout: Layout, schemes: list[str]) -> list[dict[str, Any]]:
    paths = [str(gguf_file(layout, s)) for s in ["f16", *schemes]]
    out = subprocess.run(
        [str(venv_python(layout.llamacpp_venv)), "-c", INSPECT, *paths],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    data = json.loads(out.stdout)
    return [data[p] for p in paths]


def test_prepared_ggufs(llamacpp_endpoints: Any) -> None:
    """Every GGUF scheme is prepared once (a second prepare runs no step) and holds what its
    name says; the metadata (chat template included) survives the rewrite."""
    local.prepare_llamacpp(["q8_0", "q4_k_m", "q2_k"])  # minutes the first time, then markers
    assert local.prepare_llamacpp(["q8_0", "q4_k_m", "q8_0-kv", "q2_k"]) == {}
    layout = Layout.current()
    # One inspection of every file: each reads the F16 reference's vocabulary and layers again.
    f16, q8, q4, q2 = inspect(layout, ["q8_0", "q4_k_m", "q2_k"])
    # general.file_type: llama.cpp's LLAMA_FTYPE_MOSTLY_F16 = 1, _Q8_0 = 7, _Q4_K_M = 15.
    assert [d["file_type"] for d in (f16, q8, q4)] == [1, 7, 15]
    assert set(f16["types"]) == {"F16", "F32"}
    assert set(q8["types"]) == {"Q8_0", "F32"}
    assert {"Q4_K", "Q6_K"} <= set(q4["types"]) <= {"Q4_K", "Q6_K", "Q5_0", "Q8_0", "F32"}
    assert f16["types"]["F32"] == q8["types"]["F32"] == q4["types"]["F32"]  # norms untouched
    for d in (f16, q8, q4):
        assert "<|im_start|>" in d["template"]
        assert d["same_keys"]
    assert f16["rel_rms"] == 0.0
    # 8-bit blocks keep the weights within a fraction of a percent; 4-5-bit ones lose more.
    assert 0 < q8["rel_rms"] < 0.01 < q4["rel_rms"] < 0.2
    # The demo's broken candidate: 2-bit Q2_K on the 30 down-projections (1536 wide, whole
    # 256-blocks), Q4_0 on the 576-wide matrices, Q8_0 on the tied embedding; LLAMA_FTYPE_MOSTLY_Q2_K
    # = 10. Its weights stray further than the 4-bit mixture's.
    assert q2["file_type"] == 10 and q2["same_keys"] and "<|im_start|>" in q2["template"]
    assert set(q2["types"]) == {"Q2_K", "Q4_0", "Q8_0", "F32"}
    assert q2["types"]["Q2_K"] == 30 and q2["types"]["Q8_0"] == 1
    assert q2["rel_rms"] > q4["rel_rms"]


def test_servers_are_probed_as_llama_cpp(llamacpp_endpoints: Any) -> None:
    # The session's endpoints, whatever else another test started beside them.
    status = local.status("llamacpp")
    assert status is not None and status.baseline == llamacpp_endpoints.baseline
    assert llamacpp_endpoints.candidates.items() <= status.candidates.items()
    infos = {i.name: i for i in local.server_info() if i.engine == "llamacpp"}
    assert infos["f16"].healthy and infos["q8_0-kv"].healthy
    assert infos["f16"].served_model_name == "smollm2-135m-gguf-f16"
    _, provs = asyncio.run(probe_all(*_refs(llamacpp_endpoints), RunOptions()))
    for prov, name in zip(provs, ("f16", "q8_0-kv"), strict=True):
        assert prov.engine == "llama.cpp"
        assert prov.model == f"smollm2-135m-gguf-{name}"
        assert prov.max_context == 4096  # per slot
        assert prov.tokenizer_source == "endpoint /tokenize (llama.cpp)"
        caps = prov.capabilities
        assert caps["chat"] and caps["completions"] and caps["logprobs"] and caps["tokenize"]
        # llama.cpp ignores `echo` and has no prompt_logprobs: the loglikelihood suites refuse.
        assert not caps["echo"] and not caps["prompt_logprobs"]
    assert provs[0].tokenizer_fingerprint == provs[1].tokenizer_fingerprint


def _refs(endpoints: Any) -> tuple[EndpointRef, list[EndpointRef]]:
    return (
        EndpointRef(url=endpoints.baseline, name="f16"),
        [EndpointRef(url=u, name=n) for n, u in endpoints.candidates.items()],
    )


def documented() -> dict[str, tuple[str, str]]:
    """docs/local-endpoints.md's llama.cpp table: suite → (runs|refused|preflight, row text)."""
    text = DOCS.read_text(encoding="utf-8")
    section = text.split("## llama.cpp", 1)[1]
    rows = re.findall(r"^\| `([\w-]+)` \| \w+ \| (runs|refused|preflight)\b(.*)$", section, re.M)
    return {name: (status, rest) for name, status, rest in rows}


def test_every_catalog_suite_runs_or_is_refused_as_documented(llamacpp_endpoints: Any) -> None:
    base, cands = _refs(llamacpp_endpoints)
    # The capabilities probed only on request (tools, json_schema) too, as a run of these
    # suites would probe them.
    _, provs = asyncio.run(probe_all(base, cands, RunOptions(), optional=OPTIONAL_CAPABILITIES))
    docs = documented()
    suites = [s for s in catalog() if isinstance(s, Suite)]
    assert {s.name for s in suites} == set(docs)
    for suite in suites:
        status, row = docs[suite.name]
        try:
            check_capabilities([suite], [base, *cands], provs)
        except CapabilityError as err:
            assert status == "refused", (suite.name, str(err))
            missing = re.findall(r"needs ([\w, ]+), which", str(err))[0]
            assert all(f"`{cap}`" in row for cap in missing.split(", ")), (suite.name, row)
        else:
            assert status in ("runs", "preflight"), suite.name


def _run(endpoints: Any, suites: list[Suite]) -> tuple[Any, list[Sample]]:
    samples: list[Sample] = []

    async def sink(sample: Sample) -> None:
        samples.append(sample)

    base, cands = _refs(endpoints)
    result = asyncio.run(
        execute(
            run_id="llamacpp-test",
            baseline=base,
            candidates=cands,
            suites=suites,
            options=RunOptions(concurrency=4),
            sink=sink,
        )
    )
    return result, samples


def test_needle_runs_through_llama_cpp_tokenize(llamacpp_endpoints: Any) -> None:
    """A needle run sized in llama.cpp's own tokens: every item answered, the candidate named,
    a verdict given (its value is the host's: never asserted)."""
    spec = SuiteSpec(
        name="needle-llamacpp-tiny",
        kind="needle",
        seed=3,
        params={"lengths": [256], "depths": [0.5], "haystacks": 1, "max_tokens": 16},
    )
    suite = suite_kinds()["needle"](spec)
    result, samples = _run(llamacpp_endpoints, [suite])
    assert len(samples) == 2 and all(s.error is None for s in samples)
    (cand,) = result.candidates
    assert cand.endpoint.name == "q8_0-kv"
    assert cand.provenance.model == "smollm2-135m-gguf-q8_0-kv"
    (res,) = cand.suites
    assert res.n_errors == 0 and res.verdict in ("pass", "fail", "inconclusive")
    # Each message was sized with llama.cpp's /tokenize: the largest that fits 256 tokens.
    assert all(200 <= int(s.data["context_tokens"]) <= 256 for s in samples), samples[0].data


def test_a_refused_suite_sends_nothing(llamacpp_endpoints: Any) -> None:
    drift = next(s for s in catalog() if isinstance(s, Suite) and s.name == "drift-smoke")
    with pytest.raises(CapabilityError, match="needs prompt_logprobs"):
        _run(llamacpp_endpoints, [drift])


def test_a_broken_gguf_fails_fast_with_its_cause(
    llamacpp_endpoints: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real launcher pointed at a file that is not a GGUF: the server exits at once, and
    the error names llama.cpp's cause; nothing is left recorded."""
    real = Layout.current()
    monkeypatch.setenv("EVALSVC_HOME", str(tmp_path / "home"))
    home = Layout.current()
    spec = _llamacpp.build_spec(home, "f16")
    bogus = tmp_path / "bogus.gguf"
    bogus.write_text("not a GGUF\n")
    argv = [str(venv_python(real.llamacpp_venv)), *spec.argv[1:]]
    argv[2] = str(bogus)
    started = time.monotonic()
    with pytest.raises(LocalError, match="f16 died during startup.*Failed to init server"):
        ensure_running(home, [dataclasses.replace(spec, argv=tuple(argv))], timeout=600)
    assert time.monotonic() - started < 300  # found dead, not left to the deadline
    assert load_state(home.state_file).servers == {}
