"""Issue 17 break 16: with authentication off, ``api serve`` trusted any ``*.localhost`` name,
even one a hosts file maps to ``0.0.0.0`` (every interface). Every address the name resolves to
must be loopback. The real command runs in a private mount namespace whose ``/etc/hosts`` maps
the names (``unshare -m``: the machine's own hosts file is never touched). One interpreter
judges the other names and then runs ``evalsvc.cli.main`` as ``__main__`` (as ``python -m``
does): a second interpreter would cost another 2-5 CPU-seconds of start-up on a 2-core host."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from evalsvc.cli.api import is_loopback_host
from tests.fixtures.db import REPO_ROOT
from tests.fixtures.loopback import free_port


def _namespaces_work(hosts: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", f"mount --bind {hosts} /etc/hosts"],
        capture_output=True, timeout=30, check=False,
    )
    return probe.returncode == 0


#: Judges the other names, then runs the real command (argv from the command line) as
#: ``python -m evalsvc.cli.main`` would: its exit code is the process's.
_PROBE = """\
import runpy, sys
from evalsvc.cli.api import is_loopback_host as f
print([f(h) for h in ('good.localhost', 'mixed.localhost', 'localhost')], flush=True)
sys.argv[0] = 'evalsvc'
runpy.run_module('evalsvc.cli.main', run_name='__main__', alter_sys=True)
"""


def _serve_in_namespace(hosts: Path, host: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    # `timeout` only ends a server that wrongly started; a loaded host can take tens of seconds
    # to get as far as the refusal.
    serve = ["api", "serve", "--host", host, "--port", str(free_port()),
             "--database-url", f"sqlite:///{tmp_path / 'x.db'}"]
    return subprocess.run(
        ["unshare", "-m", "sh", "-c",
         'mount --bind "$1" /etc/hosts && shift && exec timeout -s TERM 120 "$@"',
         "sh", str(hosts), sys.executable, "-c", _PROBE, *serve],
        capture_output=True, text=True, timeout=300, cwd=REPO_ROOT, check=False,
        env={**os.environ, "EVALSVC_API_AUTH": "off", "EVALSVC_HOME": str(tmp_path)},
    )


def test_a_localhost_name_resolving_to_any_address_is_refused(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text(
        "127.0.0.1 localhost\n0.0.0.0 evil.localhost\n127.0.0.1 good.localhost\n"
        "127.0.0.1 mixed.localhost\n192.0.2.7 mixed.localhost\n",
        encoding="utf-8",
    )
    if not _namespaces_work(hosts):
        pytest.skip("needs unshare -m and mount (a private /etc/hosts)")
    refused = _serve_in_namespace(hosts, "evil.localhost", tmp_path)
    assert refused.returncode == 2, refused.stderr
    assert "EVALSVC_API_AUTH=off is only allowed on loopback" in refused.stderr
    assert "Traceback" not in refused.stderr
    # The same check on the other names, in the same process under the same hosts file.
    assert refused.stdout.strip() == "[True, False, True]", refused.stderr


def test_the_loopback_check_in_process() -> None:
    assert is_loopback_host("127.0.0.1") and is_loopback_host("::1")
    assert is_loopback_host("localhost")  # resolves to loopback on any sane host
    assert not is_loopback_host("0.0.0.0") and not is_loopback_host("::")
    assert not is_loopback_host("no-such-name-for-evalsvc.localhost.invalid")
    assert not is_loopback_host("example.com")
