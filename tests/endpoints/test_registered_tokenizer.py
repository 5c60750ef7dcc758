"""An endpoint registered with its model's tokenizer: used by the token-sized kinds when the
engine has no tokenize route, said so in the provenance, and guarded in server mode.

Real parts throughout: loopback servers imitating an engine without ``/tokenize`` (the engine
shapes of ``test_engines`` and the ``longctx`` oracle's ``-notok`` mode), a byte-level BPE
``tokenizer.json`` trained with Hugging Face ``tokenizers``, the registry on SQLite and
PostgreSQL, and ``runs.compare`` (what ``evalsvc compare`` calls).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from evalsvc.db import Store
from evalsvc.domain import EndpointRef, RunSpec
from evalsvc.endpoints import EndpointClient, EndpointError, LocalTokenizer, probe
from evalsvc.runner import CapabilityError
from evalsvc.services import registry, runs
from evalsvc.services.runs import UsageError
from tests.endpoints.test_engines import TEXT_IDS, engine_server
from tests.fixtures.db import (  # noqa: F401  (pytest fixtures)
    db_url,
    pg_session_url,
    sqlite_template,
)
from tests.fixtures.longctx_oracle import oracle_server, train_tokenizer, url


@pytest.fixture(scope="module")
def bpe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train_tokenizer(tmp_path_factory.mktemp("tok") / "tokenizer.json")


def _spec(baseline: EndpointRef, candidate: EndpointRef) -> RunSpec:
    return RunSpec(baseline=baseline, candidates=[candidate], suites=["needle-smoke"])


def _ids(path: Path, text: str) -> list[int]:
    return list(Tokenizer.from_file(str(path)).encode(text, add_special_tokens=False).ids)


async def test_the_probe_uses_the_registered_tokenizer_only_without_a_route(bpe: Path) -> None:
    text = "Der Hund läuft über die Straße."
    with engine_server("generic") as base:
        ref = EndpointRef(url=base, tokenizer=str(bpe.parent))  # a checkpoint directory
        async with EndpointClient(ref, retries=1) as client:
            prov = await probe(client)
            assert prov.capabilities["tokenize"] is True
            assert prov.tokenizer_source == f"tokenizer: {bpe.parent} (registered)"
            assert prov.tokenizer_fingerprint
            assert await client.tokenize(text) == _ids(bpe, text)
    # An engine with its own route keeps it: its count is the one its context limit applies to.
    with engine_server("llama.cpp") as base:
        async with EndpointClient(EndpointRef(url=base, tokenizer=str(bpe)), retries=1) as client:
            prov = await probe(client)
            assert prov.tokenizer_source == "endpoint /tokenize (llama.cpp)"
            assert await client.tokenize(text) == TEXT_IDS


async def test_an_unusable_registered_tokenizer_is_a_clear_probe_error(tmp_path: Path) -> None:
    gguf = tmp_path / "SmolLM2-135M-Instruct.F16.gguf"
    gguf.write_bytes(b"GGUF")
    not_json = tmp_path / "tokenizer.json"
    not_json.write_text("not a tokenizer")
    cases = [
        (str(tmp_path / "missing"), "no tokenizer.json at"),
        (str(gguf), "is a GGUF file; give the checkpoint's tokenizer.json"),
        (str(not_json), "is not a tokenizer.json"),
    ]
    with engine_server("generic") as base:
        for path, reason in cases:
            async with EndpointClient(EndpointRef(url=base, tokenizer=path), retries=1) as c:
                with pytest.raises(EndpointError, match=reason):
                    await probe(c)


def test_registration_loads_the_tokenizer_on_the_cli(db_url: str, tmp_path: Path) -> None:  # noqa: F811
    with Store.from_url(db_url) as store:
        with pytest.raises(UsageError, match=r"--tokenizer: no tokenizer.json at"):
            registry.register_endpoint(
                store, name="x", url="http://127.0.0.1:9/v1", tokenizer=str(tmp_path / "nope")
            )
        assert store.list_endpoints() == []


def test_a_registered_tokenizer_sizes_needle_and_longctx_items(
    db_url: str,  # noqa: F811
    bpe: Path,
    tmp_path: Path,
) -> None:
    """Registered on SQLite and PostgreSQL, carried by name into ``compare``: the suites size
    their items with it (the oracle has no /tokenize) and the provenance says so."""
    lengths = [300, 600]
    needle = tmp_path / "needle.yaml"
    needle.write_text(
        "name: nd\nkind: needle\nseed: 3\nparams:\n"
        f"  lengths: {lengths}\n  depths: [0.5]\n  haystacks: 2\n"
    )
    longctx = tmp_path / "lc.yaml"
    longctx.write_text(
        "name: lc\nkind: longctx\nseed: 3\nparams:\n  task: variable_tracking\n"
        f"  lengths: {lengths}\n  languages: [en]\n  depths: [0.3, 0.7]\n  haystacks: 3\n"
    )
    with Store.from_url(db_url) as store, oracle_server(str(bpe), error_pct=0) as srv:
        base = url(srv, "good-notok")
        registry.register_endpoint(store, name="plain", url=base)
        ref = registry.register_endpoint(store, name="notok", url=base, tokenizer=str(bpe))
        assert ref.tokenizer == str(bpe)
        assert store.get_endpoint("notok") == ref  # stored and read back

        # Without a registered tokenizer the token-sized kinds are refused up front.
        plain = runs.resolve_endpoint("plain", store)
        with pytest.raises(CapabilityError, match=r"needs tokenize"):
            runs.compare(
                RunSpec(baseline=plain, candidates=[plain], suites=[str(needle)]), store=store
            )

        notok = runs.resolve_endpoint("notok", store)
        spec = RunSpec(baseline=notok, candidates=[notok], suites=[str(needle), str(longctx)])
        report = runs.compare(spec, store=store)
        samples = store.get_samples(report["run_id"])
    assert report["baseline"]["provenance"]["tokenizer_source"] == f"tokenizer: {bpe} (registered)"
    entries = {e["suite"]: e for e in report["candidates"][0]["suites"]}
    assert entries["nd"]["n"] == 4 and entries["nd"]["n_errors"] == 0
    assert entries["lc"]["n"] == 12 and entries["lc"]["n_errors"] == 0
    # Nothing flips (the oracle against itself), but 12 flip-free items (4 haystack clusters) are
    # fewer than the exact minimum a pass can rest on (docs/statistics.md, "No pass without
    # evidence"): inconclusive, never pass.
    assert entries["lc"]["verdict"] == "inconclusive"
    lc = [s for s in samples if s.suite == "lc" and s.endpoint == "baseline"]
    # The oracle solves what it reads: the items reached it whole and were scored.
    assert sum(s.score or 0 for s in lc) / len(lc) == 1.0
    for s in lc:  # sized with the registered tokenizer: at most the target, within a few
        assert s.data["context_length"] - 4 <= s.data["context_tokens"] <= s.data["context_length"]


def test_server_mode_reads_a_tokenizer_only_under_its_root(
    db_url: str,  # noqa: F811
    bpe: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """docs/security.md: a path given over HTTP is read on the server. Without
    ``EVALSVC_TOKENIZER_ROOT`` none is accepted; with it, only absolute paths under it (links
    resolved); a submitted (inline) endpoint never carries one; workers check again."""
    monkeypatch.setenv("EVALSVC_ALLOWED_ENDPOINTS", "127.0.0.0/8")
    monkeypatch.delenv("EVALSVC_TOKENIZER_ROOT", raising=False)
    u = "http://127.0.0.1:9/v1"
    root = tmp_path / "tokenizers"
    root.mkdir()
    tok = root / "tokenizer.json"
    shutil.copy(bpe, tok)
    (tmp_path / "elsewhere").mkdir()
    (root / "escape").symlink_to(tmp_path / "elsewhere")
    with Store.from_url(db_url) as store:
        policy = runs.server_policy()
        with pytest.raises(UsageError, match="unless EVALSVC_TOKENIZER_ROOT"):
            registry.register_endpoint(store, name="a", url=u, tokenizer=str(tok), policy=policy)
        # Registered from the CLI (the operator's machine), then run by a worker: refused too.
        registry.register_endpoint(store, name="cli", url=u, tokenizer=str(tok))
        cli = runs.resolve_endpoint("cli", store)
        with pytest.raises(UsageError, match="unless EVALSVC_TOKENIZER_ROOT"):
            runs.check_server_spec(_spec(cli, cli), store=store)

        monkeypatch.setenv("EVALSVC_TOKENIZER_ROOT", str(root))
        for bad in ("tokenizer.json", str(root / "escape" / "t.json"), str(root / ".." / "x")):
            with pytest.raises(UsageError, match="not an absolute path under"):
                registry.register_endpoint(store, name="a", url=u, tokenizer=bad, policy=policy)
        assert [e.name for e in store.list_endpoints()] == ["cli"]  # nothing stored
        ref = registry.register_endpoint(store, name="a", url=u, tokenizer=str(tok), policy=policy)
        assert ref.tokenizer == str(tok)
        runs.check_server_spec(_spec(ref, cli), store=store)
        inline = EndpointRef(url=u, tokenizer=str(tok))
        with pytest.raises(UsageError, match="only read for endpoints an admin registered"):
            runs.check_server_spec(_spec(ref, inline), store=store)


def test_local_tokenizer_counts_like_the_file(bpe: Path) -> None:
    import asyncio

    text = "VAR ABCDE = 12345. 한국어 문장입니다."
    assert asyncio.run(LocalTokenizer(str(bpe)).tokenize(text)) == _ids(bpe, text)
