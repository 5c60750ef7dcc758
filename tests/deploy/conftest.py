"""Fixtures of the deployment tests: a wheel built from this checkout and a venv outside it.

``installed_wheel`` (session) copies the checkout's tracked and untracked-but-not-ignored files
to a temporary directory, builds the wheel there (``pip wheel --no-deps``; build isolation,
so setuptools comes from the configured index), and installs it into a fresh venv under another
temporary directory. That venv has no pip and its own ``site-packages`` holds only the wheel; a
``.pth`` file appends the development venv's ``site-packages`` after it so the dependencies are
not downloaded again (a plain path line: the ``.pth`` files there, such as the editable install
of this checkout, are *not* processed, so ``import evalsvc`` can only find the wheel).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.spare import spare_endpoint

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class InstalledWheel:
    wheel: Path
    venv: Path
    workdir: Path
    """A directory outside the checkout to run commands in."""

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def evalsvc(self) -> Path:
        return self.venv / "bin" / "evalsvc"

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
        env.update(
            VIRTUAL_ENV=str(self.venv),
            PATH=f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
            EVALSVC_HOME=str(self.workdir / "home"),
        )
        env.update(extra)
        return env

    def run(
        self, *args: str, timeout: float = 300, **env: str
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.evalsvc), *args],
            cwd=self.workdir,
            env=self.env(**env),
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def _source_files() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO_ROOT, capture_output=True, text=True, check=True,
    ).stdout
    return [f for f in out.split("\0") if f and (REPO_ROOT / f).is_file()]


@pytest.fixture(scope="session")
def installed_wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InstalledWheel]:
    src = tmp_path_factory.mktemp("wheel-src")
    for rel in _source_files():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / rel, src / rel)
    dist = tmp_path_factory.mktemp("wheel-dist")
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(src)],
        capture_output=True, text=True, timeout=600,
    )
    assert build.returncode == 0, build.stderr[-4000:]
    (wheel,) = dist.glob("evalsvc-*.whl")

    root = tmp_path_factory.mktemp("wheel-venv")
    env_dir = root / "venv"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(env_dir)
    site = Path(
        subprocess.run(
            [str(env_dir / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
    )
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(env_dir / "bin" / "python"),
         "install", "--no-deps", "--no-index", "-q", str(wheel)],
        capture_output=True, text=True, timeout=300,
        # A PYTHONPATH naming a checkout would make pip find evalsvc "already installed" there
        # and skip the wheel (its console script included).
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert install.returncode == 0, install.stderr[-4000:]
    (site / "zz-evalsvc-dev-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    workdir = root / "work"
    workdir.mkdir()
    yield InstalledWheel(wheel=wheel, venv=env_dir, workdir=workdir)


TINY_SUITE = """\
name: deploy-tiny
kind: reasoning
description: Four short reasoning items (deployment tests).
seed: 11
params:
  n: 4
  max_tokens: 48
gate:
  margin: 0.25
"""


def write_tiny_suite(directory: Path) -> Path:
    path = directory / "deploy-tiny.yaml"
    path.write_text(TINY_SUITE)
    return path


@pytest.fixture(scope="session")
def real_run_db(tmp_path_factory: pytest.TempPathFactory, local_endpoints: Any) -> str:
    """A SQLite store holding one real run: ``evalsvc compare`` of a local endpoint (the spare
    one, ``tests/fixtures/spare.py``) against itself on the tiny suite (gates, samples, durations
    all real), plus one queued run."""
    from evalsvc.db import Store
    from evalsvc.domain import EndpointRef, RunSpec

    root = tmp_path_factory.mktemp("real-run")
    url = f"sqlite:///{root / 'evalsvc.db'}"
    suite = write_tiny_suite(root)
    endpoint = spare_endpoint(local_endpoints)
    r = subprocess.run(
        [sys.executable, "-m", "evalsvc.cli.main", "compare", endpoint, endpoint, "--suite", str(suite)],
        cwd=root, env={**os.environ, "EVALSVC_DATABASE_URL": url},
        capture_output=True, text=True, timeout=1200,
    )
    assert r.returncode in (0, 3), r.stderr[-3000:]
    with Store.from_url(url) as st:
        st.create_run(
            RunSpec(baseline=EndpointRef(url=endpoint), candidates=[EndpointRef(url=endpoint)], suites=["needle-smoke"])
        )
    return url


from tests.fixtures.db import (  # noqa: E402, F401  (pytest fixtures)
    db_url,
    pg_session_url,
    sqlite_template,
    store,
)
