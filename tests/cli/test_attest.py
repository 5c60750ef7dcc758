"""Signed verdicts and the basis they carry, on runs made by the real runner against loopback
level servers (``tests/runner/level_server.py``: a reasoning suite whose answers are known).

- every report carries ``basis`` (valid against the shipped schema), and the Markdown, JUnit,
  terminal and ``runs gate`` show it; an allowed difference is an ``allowed_difference`` reason
  and ``--no-allowed-differences`` turns its pass into exit 1;
- ``evalsvc attest`` / ``attest verify``: a pass verifies (exit 0) and satisfies ``--require
  pass``; a byte changed in the payload or in the signature, another key, ``--require pass`` on a
  failing run and ``--max-age`` each exit 1 with the reason; unreadable keys exit 2;
- ``GET /api/v1/runs/{id}/attestation``: 404 without ``EVALSVC_ATTEST_KEY``, 409 for a queued
  run, else an envelope that verifies with the public key; the worker writes one per finished
  run when the key is set.
"""

from __future__ import annotations

import base64
import json
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import jsonschema
import pytest

from evalsvc.db import Store
from evalsvc.domain import EndpointRef, RunSpec, RunStatus
from evalsvc.reports import report_schema
from tests.fixtures.cli import run_cli
from tests.fixtures.db import sqlite_template  # noqa: F401  (fixture)
from tests.runner.level_server import level_server

SEED = 5
GOOD = dict.fromkeys(range(1, 6), 0.8)
BAD = dict.fromkeys(range(1, 6), 0.3)


def _suite(tmp: Path) -> Path:
    path = tmp / "tiny-reasoning.yaml"
    path.write_text(
        f"name: tiny-reasoning\nkind: reasoning\nseed: {SEED}\nparams:\n  n: 200\n  max_tokens: 16\n"
        "  tasks:\n    - {family: arithmetic, level: 1}\n    - {family: lists, level: 1}\n"
    )
    return path


@dataclass
class Runs:
    db: str
    tmp: Path
    passed: str
    failed: str
    allowed: str
    passed_report: dict[str, object]
    allowed_report: dict[str, object]
    compare_stderr: str
    allowed_exit: int
    private: Path
    public: Path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, sqlite_template: str) -> Iterator[Runs]:  # noqa: F811
    tmp = tmp_path_factory.mktemp("attest")
    path = tmp / "e.db"
    shutil.copy(sqlite_template, path)
    db = f"sqlite:///{path}"
    suite = str(_suite(tmp))
    with level_server(GOOD, [SEED], per_level=120) as base, \
            level_server(GOOD, [SEED], per_level=120) as same, \
            level_server(BAD, [SEED], per_level=120) as worse, \
            level_server(GOOD, [SEED], per_level=120, chat_template="llama3") as other:
        ok = run_cli("compare", base.url, same.url, "--suite", suite, "--database-url", db,
                     "--json", str(tmp / "pass.json"))
        assert ok.returncode == 0, ok.stderr[-3000:]
        bad = run_cli("compare", base.url, worse.url, "--suite", suite, "--database-url", db,
                      "--json", str(tmp / "fail.json"))
        assert bad.returncode == 1, bad.stderr[-3000:]
        # The same candidate answers, another chat template, allowed: a pass that rests on
        # an allowed difference, which the pipeline's policy refuses.
        allowed = run_cli("compare", base.url, other.url, "--suite", suite, "--database-url", db,
                          "--json", str(tmp / "allowed.json"), "--allow-difference",
                          "chat_template", "--no-allowed-differences")
    keys = run_cli("attest", "keygen", str(tmp / "signing.key"))
    assert keys.returncode == 0, keys.stderr
    reports = {k: json.loads((tmp / f"{k}.json").read_text()) for k in ("pass", "fail", "allowed")}
    yield Runs(db=db, tmp=tmp, passed=reports["pass"]["run_id"],
               failed=reports["fail"]["run_id"], allowed=reports["allowed"]["run_id"],
               passed_report=reports["pass"], allowed_report=reports["allowed"],
               compare_stderr=ok.stderr, allowed_exit=allowed.returncode,
               private=tmp / "signing.key", public=tmp / "signing.key.pub")


def _attest(runs: Runs, run_id: str, name: str, *extra: str) -> Path:
    out = runs.tmp / name
    r = run_cli("attest", run_id, "--key", str(runs.private), "-o", str(out),
                "--database-url", runs.db, *extra)
    assert r.returncode == 0, r.stderr
    return out


def _verify(runs: Runs, file: Path, *extra: str, key: Path | None = None) -> tuple[int, str]:
    r = run_cli("attest", "verify", str(file), "--key", str(key or runs.public), *extra)
    return r.returncode, " ".join(r.stderr.split())


# ---------------------------------------------------------------------------------- basis


def test_every_report_carries_its_basis_and_every_view_shows_it(runs: Runs) -> None:
    report = runs.passed_report
    jsonschema.validate(report, report_schema())
    basis = report["basis"]
    (suite,) = basis["suites"]
    assert suite["suite"] == "tiny-reasoning"
    assert suite["sides"]["baseline"]["source"] == "measured"
    assert suite["sides"]["candidate:0"]["source"] == "measured"
    assert basis["allowed_differences"] == [] and basis["oldest_reuse_s"] is None
    said = " ".join(runs.compare_stderr.split())
    assert "basis: tiny-reasoning: every sample measured in this run, on both sides" in said
    md = run_cli("runs", "report", runs.passed, "-f", "markdown", "--database-url", runs.db)
    assert "What the verdict rests on:" in md.stdout
    assert "every sample measured in this run" in md.stdout
    junit = run_cli("runs", "report", runs.passed, "-f", "junit", "--database-url", runs.db)
    assert 'name="basis" value="tiny-reasoning: every sample measured' in junit.stdout
    gate = run_cli("runs", "gate", runs.passed, "--json", "--database-url", runs.db)
    assert gate.returncode == 0
    assert json.loads(gate.stdout)["basis"]["suites"][0]["suite"] == "tiny-reasoning"


def test_an_allowed_difference_is_a_reason_and_the_policy_refuses_it(runs: Runs) -> None:
    report = runs.allowed_report
    jsonschema.validate(report, report_schema())
    assert report["verdict"] == "pass"
    # compare --no-allowed-differences: the pass rests on an allowed difference, so exit 1.
    assert runs.allowed_exit == 1
    (d,) = report["basis"]["allowed_differences"]
    assert d["field"] == "chat_template" and d["allowed_by"] == "run"
    codes = [r["code"] for r in report["reasons"]]
    assert "allowed_difference" in codes
    cand_codes = [r["code"] for r in report["candidates"][0]["reasons"]]
    assert "allowed_difference" in cand_codes
    plain = run_cli("runs", "gate", runs.allowed, "--database-url", runs.db)
    assert plain.returncode == 0, plain.stderr
    said = " ".join(plain.stderr.split())
    assert "allowed_difference: chat_template differs, as the run or its suites allow" in said
    assert "basis: allowed difference: " in said
    strict = run_cli("runs", "gate", runs.allowed, "--no-allowed-differences",
                     "--database-url", runs.db)
    assert strict.returncode == 1
    assert "refused by policy:" in strict.stderr and "refused by policy (exit 1)" in strict.stderr
    # A run without allowed differences passes the same policy; a bad age is a usage error.
    same = run_cli("runs", "gate", runs.passed, "--no-allowed-differences",
                   "--max-reuse-age", "3d", "--database-url", runs.db)
    assert same.returncode == 0, same.stderr
    bad_age = run_cli("runs", "gate", runs.passed, "--max-reuse-age", "three days",
                      "--database-url", runs.db)
    assert bad_age.returncode == 2 and "e.g. 30s, 15m, 12h, 3d or 2w" in bad_age.stderr


# ---------------------------------------------------------------------------------- attest


def test_keygen_writes_a_private_key_only_its_owner_reads(runs: Runs) -> None:
    assert stat.S_IMODE(runs.private.stat().st_mode) == 0o600
    assert b"PUBLIC KEY" in runs.public.read_bytes()
    again = run_cli("attest", "keygen", str(runs.private))
    assert again.returncode == 2 and "never overwritten" in again.stderr


def test_a_pass_verifies_and_satisfies_require_pass(runs: Runs) -> None:
    file = _attest(runs, runs.passed, "pass.intoto.json")
    envelope = json.loads(file.read_text())
    assert envelope["payloadType"] == "application/vnd.in-toto+json"
    stmt = json.loads(base64.b64decode(envelope["payload"]))
    assert stmt["_type"] == "https://in-toto.io/Statement/v1"
    (subject,) = stmt["subject"]
    assert subject["name"] == "level-model"
    fingerprint = runs.passed_report["candidates"][0]["provenance"]
    assert len(subject["digest"]["evalsvc-fingerprint"]) == 16 and fingerprint
    pred = stmt["predicate"]
    assert pred["run_id"] == runs.passed and pred["verdict"] == "pass" and pred["exit_code"] == 0
    assert pred["gates"][0]["suite"] == "tiny-reasoning" and pred["gates"][0]["verdict"] == "pass"
    assert pred["basis"]["suites"][0]["sides"]["baseline"]["source"] == "measured"
    assert len(pred["suites"][0]["sha256"]) == 64 and pred["evalsvc_version"]
    code, said = _verify(runs, file, "--require", "pass", "--max-age", "7d")
    assert code == 0, said
    assert f"verified: run {runs.passed} reads pass for level-model" in said


def test_a_changed_byte_or_another_key_fails(runs: Runs) -> None:
    file = _attest(runs, runs.passed, "tamper.intoto.json")
    envelope = json.loads(file.read_text())
    payload = bytearray(base64.b64decode(envelope["payload"]))
    at = payload.index(b'"pass"') + 1
    payload[at] = ord("P")  # "pass" -> "Pass": one byte of the signed statement
    changed = dict(envelope, payload=base64.b64encode(bytes(payload)).decode())
    tampered = runs.tmp / "tampered.intoto.json"
    tampered.write_text(json.dumps(changed))
    code, said = _verify(runs, tampered)
    assert code == 1 and "invalid: the signature does not verify" in said
    assert "changed after it was signed" in said
    sig = bytearray(base64.b64decode(envelope["signatures"][0]["sig"]))
    sig[0] ^= 1
    bad_sig = dict(envelope, signatures=[dict(envelope["signatures"][0],
                                              sig=base64.b64encode(bytes(sig)).decode())])
    (runs.tmp / "badsig.json").write_text(json.dumps(bad_sig))
    assert _verify(runs, runs.tmp / "badsig.json")[0] == 1
    other = runs.tmp / "other.key"
    assert run_cli("attest", "keygen", str(other)).returncode == 0
    code, said = _verify(runs, file, key=other.with_name("other.key.pub"))
    assert code == 1 and "signed by another key" in said
    # The unchanged file still verifies: the failures above are the changes'.
    assert _verify(runs, file)[0] == 0


def test_require_pass_on_a_failing_run_exits_1(runs: Runs) -> None:
    file = _attest(runs, runs.failed, "fail.intoto.json")
    code, said = _verify(runs, file)
    assert code == 0, said  # a valid attestation of a failed verdict
    code, said = _verify(runs, file, "--require", "pass")
    assert code == 1
    assert f"run {runs.failed} reads 'fail' (exit 1), not 'pass' as --require asks" in said


def test_max_age_and_the_basis_policy(runs: Runs) -> None:
    from evalsvc.services import attest

    with Store.from_url(runs.db) as store:
        old = attest.attest_run(store, runs.passed, attest.load_private_key(runs.private),
                                now=datetime.now(UTC) - timedelta(days=8))
    file = runs.tmp / "old.intoto.json"
    file.write_text(json.dumps(old))
    code, said = _verify(runs, file, "--max-age", "7d")
    assert code == 1 and "older than --max-age 7.0 days" in said
    assert _verify(runs, file, "--max-age", "30d")[0] == 0
    allowed = _attest(runs, runs.allowed, "allowed.intoto.json")
    assert _verify(runs, allowed, "--require", "pass")[0] == 0
    code, said = _verify(runs, allowed, "--no-allowed-differences")
    assert code == 1 and "refused by policy" in said and "chat_template" in said


def test_unusable_keys_and_runs_are_usage_errors(runs: Runs) -> None:
    r = run_cli("attest", runs.passed, "--database-url", runs.db,
                env={"EVALSVC_ATTEST_KEY": ""})
    assert r.returncode == 2 and "EVALSVC_ATTEST_KEY" in r.stderr and "keygen" in r.stderr
    r = run_cli("attest", runs.passed, "--key", str(runs.public), "--database-url", runs.db)
    assert r.returncode == 2 and "not an unencrypted PEM private key" in r.stderr
    r = run_cli("attest", "verify", str(runs.tmp / "missing.json"), "--key", str(runs.public))
    assert r.returncode == 2 and "cannot read" in r.stderr
    r = run_cli("attest", "verify", str(runs.tmp / "pass.json"), "--key", str(runs.private))
    assert r.returncode == 2 and "give its .pub" in r.stderr
    r = run_cli("attest", "nosuchrun", "--key", str(runs.private), "--database-url", runs.db)
    assert r.returncode == 2, r.stderr


# ---------------------------------------------------------------------------------- service


def test_rest_attestation_and_the_worker(runs: Runs, monkeypatch: pytest.MonkeyPatch) -> None:
    from evalsvc.scheduler import Worker
    from evalsvc.scheduler._worker import default_after_run
    from evalsvc.services import attest
    from evalsvc.webapp import create_app
    from tests.api.executors import complete_with_report
    from tests.fixtures.loopback import uvicorn_app

    monkeypatch.delenv("EVALSVC_ATTEST_KEY", raising=False)
    monkeypatch.setenv("EVALSVC_HOME", str(runs.tmp / "home"))
    public = attest.load_public_key(runs.public)
    with Store.from_url(runs.db) as store, uvicorn_app(create_app(runs.db, auth=True)) as url:
        token = store.create_api_token(name="reader", scopes=["read"])[0]
        http = httpx.Client(base_url=f"{url}/api/v1", timeout=30,
                            headers={"Authorization": f"Bearer {token}"})
        r = http.get(f"/runs/{runs.passed}/attestation")
        assert r.status_code == 404 and "EVALSVC_ATTEST_KEY" in r.json()["detail"]
        monkeypatch.setenv("EVALSVC_ATTEST_KEY", str(runs.private))
        r = http.get(f"/runs/{runs.passed}/attestation")
        assert r.status_code == 200, r.text
        assert attest.verify(r.json(), public, require="pass").predicate["run_id"] == runs.passed
        queued = store.create_run(
            RunSpec(baseline=EndpointRef(url="http://127.0.0.1:9/v1"),
                    candidates=[EndpointRef(url="http://127.0.0.1:9/v1")], suites=["smoke"]),
            status=RunStatus.queued,
        )
        r = http.get(f"/runs/{queued.id}/attestation")
        assert r.status_code == 409 and "queued" in r.json()["detail"]
        assert http.get("/runs/0000nosuch/attestation").status_code == 404
        gate = http.get(f"/runs/{runs.allowed}/gate").json()
        assert "allowed_difference" in [r["code"] for r in gate["reasons"]]
        assert gate["basis"]["allowed_differences"][0]["field"] == "chat_template"
        assert gate["exit_code"] == 0 and gate["refused_by_policy"] == []
        # The same policy as `runs gate --no-allowed-differences`, for curl-only pipelines.
        strict = http.get(f"/runs/{runs.allowed}/gate",
                          params={"allowed_differences": "false", "max_reuse_age": "3d"}).json()
        assert strict["verdict"] == "pass" and strict["exit_code"] == 1
        assert "chat_template" in strict["refused_by_policy"][0]
        bad = http.get(f"/runs/{runs.allowed}/gate", params={"max_reuse_age": "three days"})
        assert bad.status_code == 422 and "max_reuse_age" in bad.text
        http.close()
        # The dashboard's run page: the basis section, and the allowed difference in the banner.
        page = httpx.get(f"{url}/runs/{runs.allowed}", cookies={"evalsvc_token": token},
                         timeout=30)
        assert page.status_code == 200, page.text[:500]
        assert 'id="basis"' in page.text and "What the verdict rests on" in page.text
        assert 'id="allowed-differences"' in page.text
        assert "chat_template differs, as the run or its suites allow" in page.text
        # The worker attests each run it finishes, with the service's key.
        worker = Worker(store, executor=complete_with_report, after_run=default_after_run,
                        poll_seconds=0.05, lease_seconds=10)
        assert worker.run(once=True) == 1
    written = runs.tmp / "home" / "attestations" / f"{queued.id}.intoto.json"
    ok = attest.verify(json.loads(written.read_text()), public)
    assert ok.predicate["run_id"] == queued.id


def test_the_pipeline_examples_verify_before_they_deploy() -> None:
    """README's pipelines (examples/ci) deploy only after ``attest verify --require pass``."""
    import yaml

    from tests.fixtures.db import REPO_ROOT

    gha = yaml.safe_load((REPO_ROOT / "examples" / "ci" / "github-actions.yml").read_text())
    names = [s.get("name", "") for s in gha["jobs"]["gate"]["steps"]]
    verify = names.index("Verify the signed verdict")
    assert verify < names.index("Deploy the candidate")
    assert "evalsvc attest verify" in gha["jobs"]["gate"]["steps"][verify]["run"]
    assert "--require pass" in gha["jobs"]["gate"]["steps"][verify]["run"]
    gitlab = yaml.safe_load((REPO_ROOT / "examples" / "ci" / "gitlab-ci.yml").read_text())
    deploy = "\n".join(gitlab["evalsvc-deploy"]["script"])
    assert gitlab["evalsvc-deploy"]["needs"] == ["evalsvc-gate"]
    assert deploy.index("evalsvc attest verify") < deploy.index("echo \"deploy")
    assert "--require pass" in deploy


def test_max_reuse_age_refuses_a_pass_on_reused_blessed_samples(tmp_path: Path) -> None:
    """A run that reused a blessed baseline says so in its basis (the blessing, where and when it
    was measured); ``--max-reuse-age`` refuses the pass when the samples are older than it."""
    db = f"sqlite:///{tmp_path / 'e.db'}"
    suite = str(_suite(tmp_path))
    with level_server(GOOD, [SEED], per_level=120) as base, \
            level_server(GOOD, [SEED], per_level=120) as same:
        first = run_cli("compare", base.url, same.url, "--suite", suite, "--database-url", db,
                        "--json", str(tmp_path / "first.json"))
        assert first.returncode == 0, first.stderr[-2000:]
        run1 = json.loads((tmp_path / "first.json").read_text())["run_id"]
        blessed = run_cli("baselines", "bless", run1, "--database-url", db)
        assert blessed.returncode == 0, blessed.stderr
        asked = len(base.seen)
        again = run_cli("compare", base.url, same.url, "--suite", suite, "--database-url", db,
                        "--json", str(tmp_path / "again.json"), "--max-reuse-age", "0s")
        assert len(base.seen) == asked, "the blessed items were not sent to the baseline again"
    report = json.loads((tmp_path / "again.json").read_text())
    jsonschema.validate(report, report_schema())
    side = report["basis"]["suites"][0]["sides"]["baseline"]
    assert side["source"] == "blessing" and side["blessed_run"] == run1
    assert side["items"] == 200 and side["endpoint"] and side["measured_at"]
    assert report["verdict"] == "pass" and again.returncode == 1
    said = " ".join(again.stderr.split())
    assert "refused by policy: tiny-reasoning: the baseline's samples were reused from blessing" in said
    assert "basis: tiny-reasoning: baseline reused from blessing" in said
    ok = run_cli("runs", "gate", report["run_id"], "--max-reuse-age", "7d", "--database-url", db)
    assert ok.returncode == 0, ok.stderr
