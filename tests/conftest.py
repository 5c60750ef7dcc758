"""Shared fixtures.

- ``local_endpoints``: the real local vLLM-CPU endpoints (bf16 baseline; fp8-kv, w8a8 and w4a16
  candidates), prepared and started once per test session through ``evalsvc.local.ensure_up``.
  Servers this session started are stopped at the end; servers that were already running (a
  developer's ``evalsvc local up``) are left alone.
- ``EVALSVC_TEST_CANDIDATES`` narrows the candidates (comma-separated); by default every
  candidate this CPU can serve (vLLM-CPU's FP8 KV cache needs AVX-512 or AMX, so ``fp8-kv`` is
  left out on AVX2-only hosts; tests that need it skip with that reason).
- Tests never write to the user's real store: ``EVALSVC_DATABASE_URL`` points at a temp file.
- When the selected tests need ``local_endpoints``, the servers are started in a background
  process as soon as collection ends, and those tests run last: a cold start (35-120 s per
  server) overlaps the tests that need no endpoint instead of blocking the first one that does
  (pytest itself keeps one of the two cores busy). A session that selects no such test starts
  nothing (``-m "not endpoints"``, ``make test-fast``).
  Under pytest-xdist (``make test``: ``-n 3 --dist loadgroup``) the endpoint tests are one
  group: the worker given it starts the servers when its first test asks, and stops them.
- Tests that drive Chromium (the ``browser`` fixture) are marked ``browser``.
- ``llamacpp_endpoints``: the real local llama.cpp endpoints (``f16`` baseline, ``q8_0-kv``
  candidate), prepared and started once per session through ``ensure_up(engine="llamacpp")``
  and stopped at the end unless they were already running. No CPU gate: llama.cpp's CPU build
  serves SmolLM2-135M on an AVX2-only host within the tests' budget (docs/local-endpoints.md);
  tests using it are marked ``llamacpp`` and ``EVALSVC_TEST_LLAMACPP=0`` skips them.
- ``serving_endpoints``: whichever local engine this host can run the endpoint tests on: the
  vLLM-CPU endpoints (``local_endpoints``) where they are not skipped as too slow, else the
  llama.cpp ones (``llamacpp_endpoints``). For tests whose claim holds on any engine (a plugin
  kind's views, a verdict's reasons), so that they run on an AVX2-only host too; mark them both
  ``endpoints`` and ``llamacpp``. ``local_engine()`` says which one a session uses.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.plugin import echo_kind  # noqa: F401  (the echo test plugin kind, session)

# The background start of the local servers (see the module docstring): the process, its log,
# and whether the baseline was already healthy before it (then this session started nothing).
_bg: dict[str, object] = {}


def _wanted_candidates() -> tuple[str, ...]:
    from evalsvc import local

    env = os.environ.get("EVALSVC_TEST_CANDIDATES")
    return tuple(c for c in env.split(",") if c) if env else local.supported_candidates()


@functools.cache  # asked for every collected test; the host and the environment do not change
def local_engine() -> str:
    """The engine ``serving_endpoints`` uses in this session: ``vllm`` or ``llamacpp``."""
    return "vllm" if _slow_host_reason() is None else "llamacpp"


def _needs_endpoints(item: pytest.Item) -> bool:
    names = getattr(item, "fixturenames", ())
    return "local_endpoints" in names or (
        "serving_endpoints" in names and local_engine() == "vllm"
    )


def _needs_llamacpp(item: pytest.Item) -> bool:
    names = getattr(item, "fixturenames", ())
    return "llamacpp_endpoints" in names or (
        "serving_endpoints" in names and local_engine() == "llamacpp"
    )


def pytest_itemcollected(item: pytest.Item) -> None:
    # Before -m selects: the browser tests can be left out by marker (``make test-fast``).
    if "browser" in getattr(item, "fixturenames", ()):
        item.add_marker(pytest.mark.browser)
    # Under pytest-xdist (``make test`` runs ``-n 3 --dist loadgroup``) every endpoint test runs
    # in one worker, so one worker owns the servers' start and stop. Marked at collection: xdist
    # reads the group before any modifyitems hook of ours.
    if _needs_endpoints(item):
        item.add_marker(pytest.mark.xdist_group("local-endpoints"))
    # Likewise the llama.cpp servers: one worker starts, uses and stops them.
    if _needs_llamacpp(item):
        item.add_marker(pytest.mark.xdist_group("local-llamacpp"))


def _xdist_worker() -> bool:
    return bool(os.environ.get("PYTEST_XDIST_WORKER"))


def _slow_host_reason() -> str | None:
    """Why the endpoint tests cannot run in a test session on this host, or None.

    On a 2-core AVX2-only AMD EPYC (Zen 3) the local bf16 baseline measured at most 32 generated
    tokens/s and 9-65 prompt tokens/s (an AVX-512 host: 122-152 tokens/s at 4 concurrent;
    docs/benchmarks.md): the endpoint tests, sized for the latter, then need hours, past any CI
    limit. ``EVALSVC_TEST_ENDPOINTS=1``
    runs them anyway (``make test-endpoints``)."""
    if os.environ.get("EVALSVC_TEST_ENDPOINTS") == "1":
        return None
    from evalsvc import local

    if "fp8-kv" in local.supported_candidates():  # the same AVX-512/AMX condition
        return None
    return (
        "this CPU has no AVX-512 or AMX, where the local bf16 baseline was measured too slow for "
        "the endpoint tests in one session (docs/benchmarks.md); EVALSVC_TEST_ENDPOINTS=1 runs them"
    )


@pytest.hookimpl(trylast=True)  # after -m/-k deselection, so deselected tests start nothing
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    needing = [it for it in items if _needs_endpoints(it)]
    if not needing:
        return
    reason = _slow_host_reason()
    if reason:
        for it in needing:
            it.add_marker(pytest.mark.skip(reason=reason))
        return
    # Stable: the endpoint tests keep their order among themselves, the others theirs.
    items[:] = [it for it in items if not _needs_endpoints(it)] + needing
    # Under xdist each worker collects every test, but only the worker given the endpoint group
    # uses the servers: no worker starts them in the background (one worker's session end would
    # stop servers another still uses); the fixture starts and stops them in that one worker.
    if config.option.collectonly or os.environ.get("EVALSVC_TEST_NO_BACKGROUND_UP") or _xdist_worker():
        return
    from evalsvc import local

    _bg["before"] = local.status()
    if _bg["before"] is not None and set(_wanted_candidates()) <= set(_bg["before"].candidates):  # type: ignore[attr-defined]
        return  # already serving everything the tests ask for
    log = Path(config.rootpath) / "out" / "test-local-up.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    # A separate process with the environment as it is now: tests that monkeypatch
    # EVALSVC_HOME meanwhile cannot redirect it. ensure_up holds the state lock, so the
    # fixture's own ensure_up below waits for it and then reuses the healthy servers.
    timeout = os.environ.get("EVALSVC_TEST_UP_TIMEOUT", "1500")
    code = "import sys; from evalsvc import local; local.ensure_up(sys.argv[2:], timeout=float(sys.argv[1]))"
    with log.open("ab") as out:
        _bg["proc"] = subprocess.Popen(
            [sys.executable, "-c", code, timeout, *_wanted_candidates()],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A session that ended before any test asked for the servers (interrupted, or the first
    failure with ``-x``) stops the background start, and what it started unless kept."""
    proc = _bg.pop("proc", None)
    if not isinstance(proc, subprocess.Popen):
        return
    if proc.poll() is None:
        proc.terminate()
        proc.wait(30)
    if _bg.get("before") is None and not os.environ.get("EVALSVC_TEST_KEEP_ENDPOINTS"):
        from evalsvc import local

        local.down("vllm")


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

    wanted = _wanted_candidates()
    before = _bg["before"] if "before" in _bg else local.status()
    proc = _bg.pop("proc", None)
    if isinstance(proc, subprocess.Popen):
        # Its outcome is not trusted blindly: ensure_up below checks (and on failure reports)
        # the servers itself.
        proc.wait()
    endpoints = local.ensure_up(wanted, timeout=float(os.environ.get("EVALSVC_TEST_UP_TIMEOUT", "1500")))
    yield endpoints
    # Stop the servers only if this session started them all (a developer's own `evalsvc local
    # up` is left running); `down` stops exactly the PIDs in the state file.
    if before is None and not os.environ.get("EVALSVC_TEST_KEEP_ENDPOINTS"):
        local.down("vllm")


LLAMACPP_TEST_CANDIDATES = ("q8_0-kv",)


@pytest.fixture(scope="session")
def llamacpp_endpoints() -> Iterator[object]:
    """The real llama.cpp baseline and ``q8_0-kv`` candidate (two servers, one thread each)."""
    if os.environ.get("EVALSVC_TEST_LLAMACPP") == "0":
        pytest.skip("EVALSVC_TEST_LLAMACPP=0")
    from evalsvc import local
    from evalsvc.local._host import unsupported_reason

    reason = unsupported_reason("f16")
    if reason is not None:
        pytest.skip(reason)

    before = local.status("llamacpp")
    if before is not None and set(LLAMACPP_TEST_CANDIDATES) <= set(before.candidates):
        # Already serving (a developer's `local up`, or another session's): reuse them without
        # ensure_up, which takes the state lock that a long `local up` of another engine may
        # hold for many minutes. `status` reads the state and probes health, lock-free.
        yield local.LocalEndpoints(
            baseline=before.baseline,
            candidates={n: before.candidates[n] for n in LLAMACPP_TEST_CANDIDATES},
        )
        return
    timeout = float(os.environ.get("EVALSVC_TEST_UP_TIMEOUT", "1500"))
    endpoints = local.ensure_up(LLAMACPP_TEST_CANDIDATES, engine="llamacpp", timeout=timeout)
    yield endpoints
    if before is None and not os.environ.get("EVALSVC_TEST_KEEP_ENDPOINTS"):
        local.down("llamacpp")


@pytest.fixture(scope="session")
def serving_endpoints(request: pytest.FixtureRequest) -> object:
    """``local_endpoints`` where the vLLM endpoint tests run on this host, else
    ``llamacpp_endpoints`` (see the module docstring); both have ``baseline`` and
    ``candidates``."""
    name = "local_endpoints" if local_engine() == "vllm" else "llamacpp_endpoints"
    return request.getfixturevalue(name)


@pytest.fixture
def repo_root() -> Path:
    return Path(__file__).resolve().parents[1]
