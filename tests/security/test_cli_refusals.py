"""The CLI side of issue 9: refusals are exit 2 with one line, never a start or a traceback.

The commands run in the test's own process (``tests.fixtures.cli.run_cli``, the same Typer app;
an uncaught exception fails the test): a separate interpreter costs 2-5 CPU-seconds of start-up
each on a 2-core host. ``api serve`` and ``worker`` are refused before they start; a refusal that
regressed would serve or poll in the test process, so those tests are bounded (120 s, as the
child process was). One case, ``test_the_real_command_refuses_auth_off_beyond_loopback``, still
runs ``python -m evalsvc.cli.main``, so the real entry point's exit code and its whole stderr
(exactly one line) stay covered.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.cli import run_cli, run_cli_process
from tests.fixtures.faults import listener


def test_the_real_command_refuses_auth_off_beyond_loopback(tmp_path: Path) -> None:
    r = run_cli_process("api", "serve", "--host", "0.0.0.0", "--port", "0", timeout=60,
                        env={"EVALSVC_API_AUTH": "off", "EVALSVC_HOME": str(tmp_path)})
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "EVALSVC_API_AUTH=off is only allowed on loopback" in lines[0]
    assert "Traceback" not in r.stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.10", "example.com"])
def test_auth_off_refuses_to_serve_beyond_loopback(host: str, tmp_path: Path) -> None:
    r = run_cli(
        "api",
        "serve",
        "--host",
        host,
        "--port",
        "0",
        env={"EVALSVC_API_AUTH": "off", "EVALSVC_HOME": str(tmp_path)},
    )
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "EVALSVC_API_AUTH=off is only allowed on loopback" in lines[0]
    assert "Traceback" not in r.stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", [("api", "serve"), ("worker",)])
def test_a_bad_allowlist_stops_the_server_and_the_worker_at_start(
    command: tuple[str, ...], tmp_path: Path
) -> None:
    r = run_cli(
        *command,
        env={
            "EVALSVC_ALLOWED_ENDPOINTS": "10.0.0.0/33",
            "EVALSVC_DATABASE_URL": f"sqlite:///{tmp_path / 'x.db'}",
        },
    )
    assert r.returncode == 2, r.stderr
    assert "EVALSVC_ALLOWED_ENDPOINTS: bad CIDR '10.0.0.0/33'" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.timeout(120)
def test_userinfo_is_refused_by_compare_and_endpoints_add(tmp_path: Path) -> None:
    env = {"EVALSVC_DATABASE_URL": f"sqlite:///{tmp_path / 'x.db'}"}
    with listener() as lst:
        leaky = f"http://admin:pw-9x7@127.0.0.1:{lst.port}/v1"
        compare = run_cli("compare", leaky, lst.url(), "--suite", "needle-smoke", env=env)
        add = run_cli("endpoints", "add", "x", leaky, env=env)
    for r in (compare, add):
        assert r.returncode == 2, r.stderr
        assert "carries credentials" in r.stderr and "pw-9x7" not in r.stderr
    assert lst.connections == 0


@pytest.mark.timeout(120)
def test_local_compare_needs_no_allowlist_for_loopback(tmp_path: Path) -> None:
    """Local mode (in-process compare) restricts nothing: a loopback endpoint is called (the
    listener never answers, so the run ends unreachable, exit 4, not refused, exit 2)."""
    env = {
        "EVALSVC_DATABASE_URL": f"sqlite:///{tmp_path / 'x.db'}",
        "EVALSVC_ALLOWED_ENDPOINTS": "",
    }
    with listener() as lst:
        r = run_cli(
            "compare", lst.url(), lst.url(), "--suite", "needle-smoke", "--timeout", "1", env=env
        )
    assert r.returncode == 4, r.stderr
    assert "refused" not in r.stderr and lst.connections >= 1


def test_endpoints_add_warns_about_keys_workers_will_not_send(tmp_path: Path) -> None:
    env = {"EVALSVC_DATABASE_URL": f"sqlite:///{tmp_path / 'x.db'}"}
    r = run_cli(
        "endpoints", "add", "prod", "http://127.0.0.1:9/v1", "--api-key-env", "PROD_KEY", env=env
    )
    assert r.returncode == 0, r.stderr
    err = " ".join(r.stderr.split())  # rich wraps at the width it finds (80 without a terminal)
    assert "warning: api_key_env 'PROD_KEY' is refused" in err
    assert "Only in-process `evalsvc compare` will send it" in err


def test_endpoints_list_redacts_old_userinfo(tmp_path: Path) -> None:
    from evalsvc.db import Store

    url = f"sqlite:///{tmp_path / 'x.db'}"
    with Store.from_url(url) as store:
        store.upgrade()
        store.upsert_endpoint(name="old", url="http://admin:pw-9x7@10.0.0.1:8000/v1")
    r = run_cli("endpoints", "list", "--json", env={"EVALSVC_DATABASE_URL": url})
    assert r.returncode == 0, r.stderr
    assert "pw-9x7" not in r.stdout and "http://***@10.0.0.1:8000/v1" in r.stdout
