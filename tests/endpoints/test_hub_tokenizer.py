"""An engine without a tokenize route and no registered tokenizer: the probe takes the served
model's tokenizer from the Hugging Face hub (``evalsvc.endpoints._hub``), caches it under
``EVALSVC_HOME/hub``, says so in the provenance, and when the hub is not reachable the refusal
says that too, beside the fix.

Real parts: the probe runs in its own interpreter (``huggingface_hub`` reads ``HF_ENDPOINT`` and
``HF_HUB_OFFLINE`` when it is imported) against a loopback engine without ``/tokenize``
(``test_engines``' generic shape, model ``smollm2``) and a loopback server in the hub's URL
layout (``/{repo}/resolve/{revision}/{file}`` with the hub's ``X-Repo-Commit``/``ETag``
headers and error codes) serving a byte-level BPE ``tokenizer.json`` trained with Hugging Face
``tokenizers``. The hub itself is never contacted.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from tests.endpoints.test_engines import engine_server
from tests.fixtures.cli import run_cli_process
from tests.fixtures.longctx_oracle import train_tokenizer
from tests.fixtures.loopback import LoopbackHTTPServer, free_port, serving

ROOT = Path(__file__).resolve().parents[2]
REPO = "smollm2"  # the generic engine's served model id
COMMIT = "0123456789abcdef0123456789abcdef01234567"
TEXT = "Der Hund läuft über die Straße."


@pytest.fixture(scope="module")
def repo_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    tok = train_tokenizer(tmp_path_factory.mktemp("tok") / "tokenizer.json")
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 2048}
    return {"tokenizer.json": tok.read_bytes(),
            "tokenizer_config.json": json.dumps(config).encode()}


class _Hub(LoopbackHTTPServer):
    def __init__(self, repos: dict[str, dict[str, bytes]]) -> None:
        super().__init__(_HubHandler)
        self.repos = repos
        self.requests: list[str] = []


class _HubHandler(BaseHTTPRequestHandler):
    server: _Hub

    def log_message(self, *args: object) -> None:
        pass

    def _answer(self, body: bool) -> None:
        self.server.requests.append(f"{self.command} {self.path}")
        parts = self.path.split("?")[0].strip("/").split("/")
        try:
            at = parts.index("resolve")
        except ValueError:
            return self._error(404, "EntryNotFound")
        repo, name = "/".join(parts[:at]), "/".join(parts[at + 2:])
        files = self.server.repos.get(repo)
        if files is None:
            return self._error(401, "RepoNotFound")
        data = files.get(name)
        if data is None:
            return self._error(404, "EntryNotFound")
        self.send_response(200)
        self.send_header("X-Repo-Commit", COMMIT)
        self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)

    def _error(self, status: int, code: str) -> None:
        payload = json.dumps({"error": code}).encode()
        self.send_response(status)
        self.send_header("X-Error-Code", code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    def do_HEAD(self) -> None:  # noqa: N802
        self._answer(body=False)

    def do_GET(self) -> None:  # noqa: N802
        self._answer(body=True)


@contextmanager
def hub_server(repos: dict[str, dict[str, bytes]]) -> Iterator[_Hub]:
    with serving(_Hub(repos)) as server:
        yield server


def _refusing_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


_PROBE = r"""
import asyncio, json, sys
from evalsvc.domain import EndpointRef
from evalsvc.endpoints import EndpointClient, probe
async def main():
    async with EndpointClient(EndpointRef(url=sys.argv[1]), retries=1) as client:
        prov = await probe(client)
        ids = await client.tokenize(sys.argv[2]) if prov.capabilities["tokenize"] else None
        local = client.local_tokenizer.path if client.local_tokenizer else None
        print(json.dumps({"prov": prov.model_dump(mode="json"), "ids": ids, "local": local}))
asyncio.run(main())
"""


def _probe(url: str, home: Path, **hf: str) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(EVALSVC_HOME=str(home), PYTHONPATH=str(ROOT), **hf)
    out = subprocess.run([sys.executable, "-c", _PROBE, url, TEXT], capture_output=True,
                         text=True, env=env, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])  # type: ignore[no-any-return]


def test_the_served_models_tokenizer_comes_from_the_hub_and_is_cached(
    repo_files: dict[str, bytes], tmp_path: Path
) -> None:
    expected = Tokenizer.from_str(repo_files["tokenizer.json"].decode()).encode(
        TEXT, add_special_tokens=False).ids
    home = tmp_path / "home"
    with engine_server("generic") as engine, hub_server({REPO: repo_files}) as hub:
        got = _probe(engine, home, HF_ENDPOINT=hub.origin)
        asked = list(hub.requests)
    prov = got["prov"]
    assert isinstance(prov, dict)
    snapshot = home.resolve() / "hub" / f"models--{REPO}" / "snapshots" / COMMIT
    assert prov["capabilities"]["tokenize"] is True
    assert prov["tokenizer_source"] == f"hub: {REPO}@{COMMIT} ({snapshot})"
    assert prov["tokenizer_fingerprint"]
    assert got["ids"] == expected and got["local"] == str(snapshot)
    assert (snapshot / "tokenizer_config.json").is_file()  # what lm-eval's loader needs
    assert any(r.startswith(f"GET /{REPO}/resolve/main/tokenizer.json") for r in asked), asked
    # The cache serves a later probe with the hub gone and HF_HUB_OFFLINE set.
    with engine_server("generic") as engine:
        again = _probe(engine, home, HF_ENDPOINT=_refusing_url(), HF_HUB_OFFLINE="1")
    assert again["ids"] == expected
    assert again["prov"]["tokenizer_source"] == prov["tokenizer_source"]  # type: ignore[index]


def test_a_repo_without_the_model_or_its_tokenizer_is_named(
    repo_files: dict[str, bytes], tmp_path: Path
) -> None:
    with engine_server("generic") as engine, hub_server({"other/model": repo_files}) as hub:
        missing = _probe(engine, tmp_path / "a", HF_ENDPOINT=hub.origin)
    with engine_server("generic") as engine, hub_server({REPO: {"README.md": b"x"}}) as hub:
        bare = _probe(engine, tmp_path / "b", HF_ENDPOINT=hub.origin)
    for got, why in ((missing, f"the hub has no repo {REPO} this process may read"),
                     (bare, f"the hub repo {REPO} has no tokenizer.json")):
        prov = got["prov"]
        assert isinstance(prov, dict) and prov["capabilities"]["tokenize"] is False
        assert prov["tokenizer_source"].startswith(
            "none: no tokenize route, no registered tokenizer; " + why), prov["tokenizer_source"]


def test_an_unreachable_hub_is_named_beside_the_fix(tmp_path: Path) -> None:
    """The hub refuses connections: the probe records why, and a run whose suites need
    ``tokenize`` is refused (exit 2) with the fix and that reason."""
    hub = _refusing_url()
    with engine_server("generic") as engine:
        got = _probe(engine, tmp_path / "home", HF_ENDPOINT=hub)
        prov = got["prov"]
        assert isinstance(prov, dict) and prov["capabilities"]["tokenize"] is False
        assert prov["tokenizer_source"].startswith(
            f"none: no tokenize route, no registered tokenizer; the Hugging Face hub was not "
            f"reachable for {REPO}")
        env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
        env.update(HF_ENDPOINT=hub, EVALSVC_HOME=str(tmp_path / "home"),
                   EVALSVC_DATABASE_URL=f"sqlite:///{tmp_path / 'store.db'}")
        r = run_cli_process("compare", engine, engine, "--suite", "needle-gpu", env=env)
    assert r.returncode == 2, r.stderr[-3000:]
    msg = " ".join(r.stderr.split())
    assert "needs tokenize" in msg and "evalsvc endpoints add NAME URL --tokenizer PATH" in msg
    assert (f"the served model's tokenizer from the Hugging Face hub was tried: the Hugging "
            f"Face hub was not reachable for {REPO}") in msg
