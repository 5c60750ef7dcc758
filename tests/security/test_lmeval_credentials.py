"""The lm-eval kind passes a key on to its subprocess: it must obey the same credential rule
as the client, and never start lm-eval for an endpoint the client refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalsvc.domain import EndpointRef, Item, Sample
from evalsvc.endpoints import EgressPolicy, EndpointClient, EndpointError
from evalsvc.suites import resolve
from tests.fixtures.faults import SECRET, base_url, fault_server, listener


async def test_a_refused_key_never_reaches_lm_eval(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALSVC_DATABASE_URL", "postgresql://evalsvc:db-secret-41@db/evalsvc")
    # If the subprocess were started, it would have to find a Python with lm-eval: point that
    # at a path that does not exist, so a start would fail loudly with another message.
    monkeypatch.setenv("EVALSVC_LMEVAL_PYTHON", "/nonexistent/python")
    (suite,) = resolve(["lmeval-mc"])
    emitted: list[Sample] = []

    async def emit(sample: Sample) -> None:
        emitted.append(sample)

    with listener() as lst:
        ref = EndpointRef(url=lst.url(), api_key_env="EVALSVC_DATABASE_URL")
        async with EndpointClient(ref, egress=EgressPolicy.parse("127.0.0.0/8")) as client:
            assert client.api_key is None and client.refusal is not None
            items = [Item(id=f"doc{i}", metadata={"doc_id": i}) for i in range(2)]
            await suite.run(items, client, role="baseline", emit=emit, done=set(), concurrency=1)
    assert [s.item_id for s in emitted] == ["doc0", "doc1"]
    for s in emitted:
        assert s.error is not None and "api_key_env 'EVALSVC_DATABASE_URL' is refused" in s.error
    assert lst.connections == 0


async def test_an_allowed_key_is_resolved_for_lm_eval(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALSVC_ENDPOINT_KEY_LM", "lm-key-9")
    ref = EndpointRef(url="http://127.0.0.1:9/v1", api_key_env="EVALSVC_ENDPOINT_KEY_LM")
    async with EndpointClient(ref, egress=EgressPolicy.parse("127.0.0.0/8")) as client:
        assert client.refusal is None and client.api_key == "lm-key-9"


async def test_lm_eval_gets_the_checked_address_not_the_name() -> None:
    """lm-eval resolves on its own; in server mode it is handed the address the policy checked
    (http), so a DNS answer that changes after the check cannot steer it."""
    url = "http://localhost:8100/v1"
    allowed = EgressPolicy.parse("127.0.0.0/8,::1")  # localhost may resolve to either
    async with EndpointClient(EndpointRef(url=url), egress=allowed) as client:
        assert await client.pinned_base_url() in {
            "http://127.0.0.1:8100/v1", "http://[::1]:8100/v1"}
    async with EndpointClient(EndpointRef(url=url)) as local:  # local mode: left alone
        assert await local.pinned_base_url() == url
    async with EndpointClient(EndpointRef(url=url), egress=EgressPolicy.parse("")) as strict:
        with pytest.raises(EndpointError, match="loopback"):
            await strict.pinned_base_url()


# --- issue 17 break 1: the real subprocess path, with a stand-in for lm-eval -------------------
#
# lm-eval is not installed in the test environment (it pulls torch), so EVALSVC_LMEVAL_PYTHON
# points at a stand-in that behaves as lm-eval's API models do where it matters here: it reads
# OPENAI_API_KEY and sends it as a Bearer header to the base_url of the model arguments, logs
# the response body, and writes samples_<task>_*.jsonl (or exits 1 on an error status). evalsvc
# starts it exactly as it starts lm-eval (asyncio subprocess, the same run script's arguments and
# environment).

_STAND_IN = r'''
import json, os, sys, urllib.error, urllib.request
script, config = sys.argv[1:]  # "<_lmeval_run.py> <config.json>"
assert script.endswith("_lmeval_run.py")
cfg = json.load(open(config))
model_args = dict(kv.split("=", 1) for kv in cfg["model_args"].split(","))
json.dump(dict(os.environ), open(ENV_DUMP, "w"))
headers = {"Content-Type": "application/json"}
if os.environ.get("OPENAI_API_KEY"):
    headers["Authorization"] = "Bearer " + os.environ["OPENAI_API_KEY"]
request = urllib.request.Request(
    model_args["base_url"], data=json.dumps({"prompt": "x"}).encode(), headers=headers)
try:
    body = urllib.request.urlopen(request, timeout=60).read().decode()
except urllib.error.HTTPError as exc:
    print("response body:", exc.read().decode())  # lm-eval logs what the endpoint answered
    print("Traceback (most recent call last):")
    print("requests.exceptions.HTTPError: 400 Client Error:", exc.code)
    sys.exit(1)
out = os.path.join(cfg["output"], "model")
os.makedirs(out)
with open(os.path.join(out, "samples_" + cfg["task"] + "_2026.jsonl"), "w") as fh:
    for i in range(int(cfg["limit"])):
        fh.write(json.dumps({"doc_id": i, "acc": 1.0, "metrics": ["acc"]}) + "\n")
'''

WORKER_SECRETS = {
    "OPENAI_API_KEY": "sk-worker-openai-5b1e",
    "AWS_SECRET_ACCESS_KEY": "aws-worker-secret-93c2",
    "EVALSVC_DATABASE_URL": "postgresql://evalsvc:db-secret-41@db/evalsvc",
    "EVALSVC_ENDPOINT_KEY_OTHER": "other-endpoint-key-77",
}


def _stand_in(tmp_path: Path) -> tuple[Path, Path]:
    import sys

    dump = tmp_path / "env.json"
    script = tmp_path / "fake_lm_eval.py"
    script.write_text(f"ENV_DUMP = {str(dump)!r}\n" + _STAND_IN, encoding="utf-8")
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} {script} "$@"\n', encoding="utf-8")
    python.chmod(0o755)
    return python, dump


async def _run(ref: EndpointRef, n: int = 3) -> list[Sample]:
    (suite,) = resolve(["lmeval-mc"])
    emitted: list[Sample] = []

    async def emit(sample: Sample) -> None:
        emitted.append(sample)

    async with EndpointClient(ref, egress=EgressPolicy.parse("127.0.0.0/8")) as client:
        items = [Item(id=f"doc{i}", metadata={"doc_id": i}) for i in range(n)]
        await suite.run(items, client, role="candidate", emit=emit, done=set(), concurrency=1)
    return emitted


def _secrets_in(text: str) -> list[str]:
    return [name for name, value in WORKER_SECRETS.items() if value in text]


async def test_the_workers_secrets_never_reach_lm_eval_or_its_endpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in WORKER_SECRETS.items():
        monkeypatch.setenv(name, value)
    python, dump = _stand_in(tmp_path)
    monkeypatch.setenv("EVALSVC_LMEVAL_PYTHON", str(python))
    with fault_server() as server:
        samples = await _run(EndpointRef(url=base_url(server, "ok")))
        seen = json.dumps(server.headers_seen)
    assert [s.score for s in samples] == [1.0, 1.0, 1.0], [s.error for s in samples]
    env = json.loads(dump.read_text())
    assert _secrets_in(json.dumps(env)) == []
    assert not any(k.startswith("EVALSVC_") for k in env)
    assert env["OPENAI_API_KEY"] == "EMPTY" and env["HF_HUB_OFFLINE"] == "1"
    assert "PATH" in env and "HOME" in env
    assert server.headers_seen and _secrets_in(seen) == []
    assert server.headers_seen[0][1]["authorization"] == "Bearer EMPTY"


async def test_lm_eval_gets_the_endpoints_own_key_and_only_that(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in WORKER_SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("EVALSVC_ENDPOINT_KEY_LM", "lm-key-9")
    python, dump = _stand_in(tmp_path)
    monkeypatch.setenv("EVALSVC_LMEVAL_PYTHON", str(python))
    with fault_server() as server:
        ref = EndpointRef(url=base_url(server, "ok"), api_key_env="EVALSVC_ENDPOINT_KEY_LM")
        samples = await _run(ref)
    assert all(s.score == 1.0 for s in samples), [s.error for s in samples]
    env = json.loads(dump.read_text())
    assert env["OPENAI_API_KEY"] == "lm-key-9" and "EVALSVC_ENDPOINT_KEY_LM" not in env
    assert _secrets_in(json.dumps(env)) == []
    assert {h["authorization"] for _, h in server.headers_seen} == {"Bearer lm-key-9"}


async def test_a_failed_lm_eval_never_quotes_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """lm-eval logs response bodies; a sample error (shown to read tokens) carries only the exit
    status and the last exception's class."""
    python, _ = _stand_in(tmp_path)
    monkeypatch.setenv("EVALSVC_LMEVAL_PYTHON", str(python))
    with fault_server() as server:
        samples = await _run(EndpointRef(url=base_url(server, "secret")), n=2)
    assert len(samples) == 2
    for s in samples:
        assert s.error is not None and SECRET not in s.error and "response body" not in s.error
        assert s.error.startswith("lm-eval exited 1; last error requests.exceptions.HTTPError")
        assert "(log on the worker: " in s.error
        log = Path(s.error.rsplit("(log on the worker: ", 1)[1].rstrip(")"))
        assert SECRET in log.read_text()  # the operator still has the whole log
