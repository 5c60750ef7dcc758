"""Issue 9, "Secrets and network", drilled as an attacker would: a submit token, hostile fake
endpoints and a bare listener on loopback, the real API server and real workers running the real
executor (``execute_stored_run``), on SQLite and PostgreSQL.

A listener that must see nothing counts every TCP connection it accepts and keeps every byte.
"""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest

from evalsvc.db import export_samples
from evalsvc.domain import EndpointRef, Provenance, RunOptions, RunSpec, RunStatus, Sample
from evalsvc.reports import to_junit, to_markdown
from evalsvc.scheduler import Worker
from tests.fixtures.db import evalsvc_module, subprocess_env
from tests.fixtures.faults import SECRET, base_url, fault_server, listener

from .conftest import Api

DB_SECRET = "db-secret-4711"


def _work(api: Api) -> int:
    """A real worker with the real executor claims and executes every queued run."""
    return Worker(api.store, poll_seconds=0.05, lease_seconds=10).run(once=True)


def _body(baseline: dict[str, Any], candidate: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "baseline": baseline,
        "candidates": [candidate or baseline],
        "suites": ["needle-smoke"],
        "options": {"samples": 2},
    }


def _stored_run(api: Api, *refs: EndpointRef, suites: list[str] | None = None,
                samples: int = 2) -> str:
    """A run written straight to the store, as one from before these rules would be."""
    spec = RunSpec(baseline=refs[0], candidates=list(refs[1:] or refs[:1]),
                   suites=suites or ["needle-smoke"], options=RunOptions(samples=samples))
    return api.store.create_run(spec).id


def _finished(api: Api, run_id: str) -> Any:
    run = api.store.get_run(run_id)
    assert run is not None and run.status == RunStatus.error, run
    return run


# ---- credentials --------------------------------------------------------------------------------


def test_a_submit_token_cannot_make_a_worker_send_its_environment(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVALSVC_DATABASE_URL", f"postgresql://evalsvc:{DB_SECRET}@db/evalsvc")
    monkeypatch.setenv("EVALSVC_ENDPOINT_KEY_PROD", "prod-key-0815")
    with listener() as lst:
        hostile = {"url": lst.url(), "api_key_env": "EVALSVC_DATABASE_URL"}
        with api.client("submit") as submitter:
            resp = submitter.post("/runs", json=_body(hostile))
            assert resp.status_code == 422, resp.text
            assert "api_key_env is refused on a submitted endpoint" in resp.text
            # ... an allowed name does not make an inline endpoint credentialed either
            resp = submitter.post("/runs", json=_body(
                {"url": lst.url(), "api_key_env": "EVALSVC_ENDPOINT_KEY_PROD"}))
            assert resp.status_code == 422, resp.text
        with api.client("admin") as admin:
            template = _body(hostile)
            resp = admin.post("/schedules", json={"name": "s", "cron": "0 3 * * *",
                                                  "template": template})
            assert resp.status_code == 422 and "api_key_env is refused" in resp.text
            resp = admin.post("/endpoints", json={"name": "exfil", "url": lst.url(),
                                                  "api_key_env": "EVALSVC_DATABASE_URL"})
            assert resp.status_code == 422, resp.text
            assert "only reads variables named EVALSVC_ENDPOINT_KEY_<NAME>" in resp.text
        assert api.store.list_endpoints() == [] and api.store.list_runs() == []

        # Runs stored before these rules (or written into the database) are re-checked by the
        # worker before it opens any socket.
        api.store.upsert_endpoint(name="legacy", url=lst.url(), api_key_env="EVALSVC_DATABASE_URL")
        old = [
            _stored_run(api, EndpointRef(url=lst.url(), api_key_env="EVALSVC_DATABASE_URL")),
            _stored_run(api, EndpointRef(url=lst.url(), api_key_env="EVALSVC_ENDPOINT_KEY_PROD")),
            _stored_run(api, EndpointRef(url=lst.url(), name="legacy",
                                         api_key_env="EVALSVC_DATABASE_URL")),
        ]
        assert _work(api) == 3
        errors = [_finished(api, run_id).error for run_id in old]
    assert "credentials are only sent to endpoints an admin registered" in errors[0]
    assert "credentials are only sent to endpoints an admin registered" in errors[1]
    assert "api_key_env 'EVALSVC_DATABASE_URL' is refused" in errors[2]
    assert lst.connections == 0 and lst.received == b""


def test_a_registered_key_under_the_prefix_is_sent_to_its_endpoint(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The positive control: the admin's way still works, and it sends exactly that key."""
    monkeypatch.setenv("EVALSVC_ENDPOINT_KEY_FAKE", "fake-key-123")
    with fault_server() as srv:
        with api.client("admin") as admin:
            resp = admin.post("/endpoints", json={"name": "fake", "url": base_url(srv, "ok"),
                                                  "api_key_env": "EVALSVC_ENDPOINT_KEY_FAKE"})
            assert resp.status_code == 201, resp.text
        with api.client("submit") as submitter:
            resp = submitter.post("/runs", json=_body({"name": "fake"}))
            assert resp.status_code == 202, resp.text
        assert _work(api) == 1
    sent = {h.get("authorization") for path, h in srv.headers_seen if path.endswith("/models")}
    assert sent == {"Bearer fake-key-123"}


# ---- SSRF -----------------------------------------------------------------------------------------


def test_internal_addresses_are_refused_at_submission_and_never_called(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVALSVC_ALLOWED_ENDPOINTS", "")  # what a fresh server has
    with listener() as lst:
        port = lst.port
        urls = {
            "http://169.254.169.254/latest/meta-data/iam/": "metadata",
            "http://metadata.google.internal/computeMetadata/v1": "metadata",
            "http://[fd00:ec2::254]/latest/": "metadata",
            f"http://127.0.0.1:{port}/v1": "loopback",
            "http://127.0.0.1:5432/": "loopback",
            f"http://0x7f000001:{port}/v1": "loopback",
            f"http://2130706433:{port}/v1": "loopback",
            f"http://127.1:{port}/v1": "loopback",
            f"http://[::ffff:127.0.0.1]:{port}/v1": "loopback",
            f"http://localhost:{port}/v1": "loopback",
            "http://10.0.0.7:8000/v1": "private",
        }
        with api.client("submit") as submitter, api.client("admin") as admin:
            for url, reason in urls.items():
                resp = submitter.post("/runs", json=_body({"url": url}))
                assert resp.status_code == 422 and reason in resp.text, (url, resp.text)
                resp = admin.post("/endpoints", json={"name": "x", "url": url})
                assert resp.status_code == 422 and reason in resp.text, (url, resp.text)
            # Allowing loopback does not allow the metadata service.
            monkeypatch.setenv("EVALSVC_ALLOWED_ENDPOINTS", "127.0.0.0/8,169.254.0.0/16")
            resp = submitter.post("/runs", json=_body({"url": "http://169.254.169.254/"}))
            assert resp.status_code == 422 and "always refused" in resp.text
        assert api.store.list_runs() == []
    assert lst.connections == 0


def _loopback_name() -> str:
    """A host name that resolves to loopback without saying so: this machine's name if it
    does (the static check cannot judge it), else ``localhost``."""
    name = socket.gethostname()
    try:
        infos = socket.getaddrinfo(name, 80, type=socket.SOCK_STREAM)
    except OSError:
        return "localhost"
    return name if infos and all(str(i[4][0]).startswith("127.") for i in infos) else "localhost"


def test_the_worker_checks_the_resolved_address_before_connecting(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DNS rebinding: what was stored (or resolved at submission) is not what is dialled. The
    worker resolves again and checks the answer before it opens the socket."""
    monkeypatch.setenv("EVALSVC_ALLOWED_ENDPOINTS", "")
    with listener() as lst:
        run_id = _stored_run(api, EndpointRef(url=lst.url(_loopback_name())))
        assert _work(api) == 1
        error = _finished(api, run_id).error
    assert "loopback" in error and "refused" in error
    assert lst.connections == 0


# ---- credentials in URLs ------------------------------------------------------------------------


def test_userinfo_is_refused_and_old_data_is_redacted_everywhere(
    api: Api, tmp_path: Path
) -> None:
    with listener() as lst:
        leaky = f"http://admin:pw-9x7@127.0.0.1:{lst.port}/v1"
        with api.client("submit") as submitter, api.client("admin") as admin:
            resp = submitter.post("/runs", json=_body({"url": leaky}))
            assert resp.status_code == 422 and "carries credentials" in resp.text
            resp = admin.post("/endpoints", json={"name": "x", "url": leaky})
            assert resp.status_code == 422 and "carries credentials" in resp.text
            # (FastAPI's 422 echoes the request's own input back to its sender: not a leak.)

        # Data from before the rule: a run, its snapshot, a sample and a report holding it.
        run_id = _stored_run(api, EndpointRef(url=leaky))
        api.store.upsert_endpoint(name="old", url=leaky)
        run = api.store.get_run(run_id)
        assert run is not None
        api.store.add_schedule(name="old", cron="0 3 * * *", template=run.spec)
        with api.client("read") as reader:
            shown = [reader.get("/runs").text, reader.get(f"/runs/{run_id}").text,
                     reader.get("/endpoints").text, reader.get("/schedules").text,
                     reader.get("/schedules/old").text]
        assert all(r"***@127.0.0.1" in text for text in shown)
        assert _work(api) == 1
        error = _finished(api, run_id).error
        assert "carries credentials" in error
        with api.client("read") as reader:
            shown.append(reader.get(f"/runs/{run_id}").text)
            api.store.save_endpoint_snapshot(run_id, role="baseline",
                                             endpoint=EndpointRef(url=leaky),
                                             provenance=Provenance())
            api.store.add_samples(run_id, [Sample(suite="s", item_id="i", endpoint="baseline",
                                                  error=f"GET {leaky}/models failed")])
            report = {"run_id": run_id, "verdict": "error", "error": f"{leaky} unreachable",
                      "warnings": [], "baseline": {"url": leaky, "model": "m"},
                      "candidates": [{"url": leaky, "model": "m", "role": "candidate:0",
                                      "verdict": "error", "suites": []}]}
            api.store.save_report(run_id, report)
            shown.append(reader.get(f"/runs/{run_id}/report").text)
    out = tmp_path / "samples.jsonl"
    export_samples(api.store, run_id, format="jsonl", out=out)
    shown += [out.read_text(), to_markdown(report), to_junit(report)]
    assert "***@127.0.0.1" in shown[0] and "***@127.0.0.1" in shown[-1]
    for text in shown:
        assert "pw-9x7" not in text and "admin:" not in text
    assert lst.connections == 0


def test_the_worker_log_never_shows_userinfo(api: Api, tmp_path: Path) -> None:
    """``evalsvc worker -v`` (a real process) executing an old run whose URL has userinfo."""
    with listener() as lst:
        run_id = _stored_run(api, EndpointRef(url=f"http://admin:pw-9x7@127.0.0.1:{lst.port}/v1"))
        proc = subprocess.run(
            evalsvc_module("evalsvc.cli.worker", "--once", "-v", "--poll", "0.1"),
            env=subprocess_env(api.db_url, EVALSVC_ALLOWED_ENDPOINTS="127.0.0.0/8"),
            capture_output=True, text=True, timeout=120,
        )
    assert proc.returncode == 0, proc.stderr
    assert run_id in proc.stderr + proc.stdout  # it did log about the run ...
    assert "pw-9x7" not in proc.stderr + proc.stdout  # ... but not its credentials
    assert lst.connections == 0


# ---- hostile endpoints through the whole path -----------------------------------------------------


def test_error_pages_never_reach_the_stored_run(api: Api) -> None:
    with fault_server() as srv:
        down = _stored_run(api, EndpointRef(url=base_url(srv, "secret500")))
        # /models answers, every generation is a 400 page holding the secret.
        paged = _stored_run(api, EndpointRef(url=base_url(srv, "secret")),
                            suites=["reasoning-smoke"])
        assert _work(api) == 2
    assert "HTTP 500 Internal Server Error" in _finished(api, down).error
    paged_run = api.store.get_run(paged)
    assert paged_run is not None and paged_run.verdict == "error"  # the error budget, spent
    stored = [_finished(api, down).error, str(paged_run.error)]
    samples = api.store.get_samples(paged)
    assert samples and all(s.error == "HTTP 400 Bad Request" for s in samples)
    with api.client("read") as reader:
        stored += [reader.get(f"/runs/{down}").text, reader.get(f"/runs/{paged}").text]
    stored += [json.dumps(s.model_dump()) for s in samples]
    assert all(SECRET not in text for text in stored)


def test_long_outputs_are_stored_truncated_with_a_flag(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVALSVC_MAX_OUTPUT_CHARS", "1000")
    with fault_server() as srv:
        srv.long_chars = 100_000
        run_id = _stored_run(api, EndpointRef(url=base_url(srv, "long")),
                             suites=["reasoning-smoke"])
        assert _work(api) == 1
    samples = [s for s in api.store.get_samples(run_id) if s.error is None]
    assert samples
    for s in samples:
        assert len(s.output) == 1000 and s.output == "A" * 1000
        assert s.data["output_truncated"] is True and s.data["output_chars"] == 100_000
