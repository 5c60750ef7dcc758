"""Exit codes of infrastructure and configuration faults (issue 9, "Exit codes and errors";
issue 13's table: 2 usage/configuration, 4 infrastructure, never 1, which means a gate failed).

Every case runs the real CLI (the same Typer app) and checks the exit code, that the error is
one line on stderr and that there is no traceback. Most run it in the test's own process
(``tests.fixtures.cli.run_cli``; an uncaught exception fails the test): a separate interpreter
costs 2-5 CPU-seconds of start-up each on a 2-core host. The real ``python -m
evalsvc.cli.main`` still runs for ``api serve`` on a busy port (in-process it would raise the
test process's RLIMIT_NOFILE, and a regression would start uvicorn in it) and for one exit-2
refusal (``test_the_real_entry_point_exits_2_in_one_line``). Bad run options are refused
before any request: a loopback listener stands for the endpoints and must see no connection.
The read-only and full-disk cases use a real size-limited tmpfs (they skip where ``mount`` is
not permitted) and, for read-only on PostgreSQL, a private database with
``default_transaction_read_only``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from evalsvc.db import DatabaseWriteRefused, SampleWriter, Store
from evalsvc.db.testing import temporary_postgres_database
from evalsvc.domain import Sample
from tests.fixtures.cli import CliResult, run_cli, run_cli_process
from tests.fixtures.db import REPO_ROOT, make_spec, pg_admin_url_or_skip


def evalsvc(*args: str, env: dict[str, str] | None = None) -> CliResult:
    """The CLI in this process (see the module docstring); ``env`` is set during the call."""
    return run_cli(*args, env=env)


def assert_one_line_error(
    result: CliResult | subprocess.CompletedProcess[str], code: int, *words: str
) -> None:
    err = result.stderr
    assert result.returncode == code, f"exit {result.returncode}, wanted {code}:\n{err[-3000:]}"
    assert "Traceback" not in err, err[-3000:]
    lines = [line for line in err.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1, err
    for word in words:
        assert word in err.replace("\n", " "), err


@contextlib.contextmanager
def listener() -> Iterator[tuple[str, socket.socket]]:
    """A loopback port standing for an endpoint: nothing may connect to it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.setblocking(False)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1", sock
    finally:
        sock.close()


def assert_no_connection(sock: socket.socket) -> None:
    with pytest.raises(BlockingIOError):
        sock.accept()


# In-process, a refusal that regressed could wait on the silent listener, run a worker or expand a
# YAML bomb in the test process: each test is bounded as the child process was (120 s).
pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'evalsvc.db'}"


# ---------------------------------------------------------------- refused before any request


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--margin", "5"], ["margin", "only tighten"]),
        (["--alpha", "0"], ["alpha"]),
        (["--samples", "999999999999"], ["samples", "10000"]),
        (["--concurrency", "100000"], ["concurrency"]),
        (["--timeout", "0"], ["request_timeout_s"]),
    ],
)
def test_bad_run_options_exit_2_before_any_request(
    flags: list[str], words: list[str], sqlite_url: str
) -> None:
    with listener() as (url, sock):
        result = evalsvc(
            "compare", url, url, "--suite", "needle-smoke", "--database-url", sqlite_url, *flags
        )
        assert_one_line_error(result, 2, *words)
        assert_no_connection(sock)


def test_the_real_entry_point_exits_2_in_one_line(sqlite_url: str) -> None:
    """``python -m evalsvc.cli.main`` itself: a refused option is exit 2, one line, no request."""
    with listener() as (url, sock):
        result = run_cli_process(
            "compare", url, url, "--suite", "needle-smoke", "--database-url", sqlite_url,
            "--margin", "5", timeout=120,
        )  # fmt: skip
        assert_one_line_error(result, 2, "margin", "only tighten")
        assert_no_connection(sock)


def test_non_utf8_suite_file_exits_2(tmp_path: Path, sqlite_url: str) -> None:
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes("name: caf\xe9\nkind: needle\n".encode("latin-1"))
    with listener() as (url, sock):
        result = evalsvc("compare", url, url, "--suite", str(bad), "--database-url", sqlite_url)
        assert_one_line_error(result, 2, "not UTF-8", str(bad))
        assert_no_connection(sock)


def billion_laughs(levels: int = 9) -> str:
    lines = ['a0: &a0 "lol"']
    for i in range(1, levels + 1):
        refs = ", ".join([f"*a{i - 1}"] * 10)
        lines.append(f"a{i}: &a{i} [{refs}]")
    lines.append(f"description: *a{levels}")
    lines.append("suites: [needle-smoke]")
    return "\n".join(lines) + "\n"


def test_yaml_alias_bomb_in_a_set_file_is_refused(tmp_path: Path, sqlite_url: str) -> None:
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(billion_laughs())
    assert bomb.stat().st_size < 1000
    with listener() as (url, sock):
        result = evalsvc("compare", url, url, "--suite", str(bomb), "--database-url", sqlite_url)
        assert_one_line_error(result, 2, "aliases", str(bomb))
        assert_no_connection(sock)


def test_oversized_suite_file_is_refused(tmp_path: Path, sqlite_url: str) -> None:
    big = tmp_path / "big.yaml"
    big.write_text("name: big\nkind: needle\ndescription: " + "x" * 1_100_000 + "\n")
    result = evalsvc(
        "compare",
        "http://127.0.0.1:9/v1",
        "http://127.0.0.1:9/v1",
        "--suite",
        str(big),
        "--database-url",
        sqlite_url,
    )
    assert_one_line_error(result, 2, "at most 1048576 bytes")


@pytest.mark.parametrize("tokenizer", ["missing", "garbage"])
def test_bad_tokenizer_path_exits_2(tokenizer: str, tmp_path: Path, sqlite_url: str) -> None:
    target = tmp_path / "tokenizer.json"
    if tokenizer == "garbage":
        target.write_text("{not a tokenizer")
    suite = tmp_path / "needle-tok.yaml"
    suite.write_text(
        f"name: needle-tok\nkind: needle\nparams:\n  lengths: [256]\n  depths: [0.5]\n"
        f"  tokenizer: {target}\n"
    )
    with listener() as (url, sock):
        result = evalsvc("compare", url, url, "--suite", str(suite), "--database-url", sqlite_url)
        assert_one_line_error(result, 2, "tokenizer")
        assert_no_connection(sock)


def test_a_bare_name_is_never_read_from_the_working_directory(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``pyproject.toml`` is in the working directory: as a suite argument it is a catalog
    name (unknown), not a file; a path to it would be read (it has a ``/``)."""
    monkeypatch.chdir(REPO_ROOT)
    assert Path("pyproject.toml").is_file()
    result = evalsvc(
        "compare",
        "http://127.0.0.1:9/v1",
        "http://127.0.0.1:9/v1",
        "--suite",
        "pyproject.toml",
        "--database-url",
        sqlite_url,
    )
    assert_one_line_error(result, 2, "unknown suite 'pyproject.toml'")


# ---------------------------------------------------------------- database configuration


@pytest.mark.parametrize("url", ["postgres://user@127.0.0.1:5432/db", "notaurl", "mysql://x/y"])
@pytest.mark.parametrize(
    "command",
    [
        ["db", "current"],
        ["db", "upgrade"],
        ["schedules", "list"],
        ["tokens", "list"],
        ["endpoints", "list"],
        ["compare", "http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1", "-s", "needle-smoke"],
        ["worker", "--once"],
    ],
)
def test_bad_database_url_exits_2_in_one_line(url: str, command: list[str]) -> None:
    result = evalsvc(*command, "--database-url", url)
    assert_one_line_error(result, 2, "invalid database URL")


def test_database_newer_than_the_code(empty_db_url: str) -> None:
    with Store.from_url(empty_db_url) as store:
        store.upgrade()
        engine = sa.create_engine(empty_db_url)
        with engine.begin() as conn:
            conn.execute(sa.text("UPDATE alembic_version SET version_num = '9999_from_the_future'"))
        engine.dispose()
    for command in (["db", "current"], ["db", "upgrade"], ["schedules", "list"]):
        result = evalsvc(*command, "--database-url", empty_db_url)
        assert_one_line_error(result, 2, "9999_from_the_future", "newer evalsvc")
        assert "run `evalsvc db upgrade`" not in result.stderr


# ---------------------------------------------------------------- read-only and full databases


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs (root and a permitted ``mount``, else skip)."""
    mount = shutil.which("mount")
    point = tmp_path / "tmpfs"
    point.mkdir()
    if mount is None or os.geteuid() != 0:
        pytest.skip("needs root and mount for a size-limited tmpfs")
    made = subprocess.run(
        [mount, "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(point)], capture_output=True
    )
    if made.returncode != 0:
        pytest.skip(f"mount -t tmpfs not permitted here: {made.stderr.decode().strip()}")
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False)


def _fresh_sqlite(directory: Path) -> str:
    url = f"sqlite:///{directory / 'evalsvc.db'}"
    with Store.from_url(url) as store:
        store.upgrade()
    return url


def test_read_only_sqlite_exits_4_in_one_line(tmpfs: Path) -> None:
    url = _fresh_sqlite(tmpfs)
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    for command in (
        ["tokens", "create", "ci", "--scope", "read"],
        ["endpoints", "add", "a", "http://127.0.0.1:9/v1"],
    ):
        result = evalsvc(*command, "--database-url", url)
        # SQLite says "readonly database", or "unable to open" when the WAL index cannot be made.
        assert_one_line_error(result, 4, "database")
        assert "readonly" in result.stderr or "unable to open" in result.stderr


@pytest.mark.postgres
def test_read_only_postgresql_exits_4_in_one_line() -> None:
    admin = pg_admin_url_or_skip()
    with temporary_postgres_database(admin) as url:
        with Store.from_url(url) as store:
            store.upgrade()
        name = sa.make_url(url).database
        engine = sa.create_engine(admin, isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.execute(sa.text(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on'))
        engine.dispose()
        result = evalsvc("tokens", "create", "ci", "--scope", "read", "--database-url", url)
        assert_one_line_error(result, 4, "refuses writes", "read-only")


def _fill(directory: Path) -> None:
    with contextlib.suppress(OSError), (directory / "filler").open("wb") as fh:
        while True:
            fh.write(b"\0" * 65536)
            fh.flush()


@pytest.mark.timeout(120)
def test_full_disk_fails_at_once_and_keeps_the_samples_buffered(tmpfs: Path) -> None:
    """A full disk is an error, not 300 s of "database unavailable" retries: ``flush`` raises
    ``DatabaseWriteRefused`` with the samples still buffered and counted in the message (the
    pytest timeout catches a regression to the retry loop)."""
    url = _fresh_sqlite(tmpfs)
    with Store.from_url(url) as store:
        run = store.create_run(make_spec())
        _fill(tmpfs)
        writer = SampleWriter(store, run.id, batch_size=10_000, retry_seconds=300)
        for i in range(200):
            writer.add(Sample(suite="s", item_id=str(i), endpoint="baseline", output="y" * 4000))
        with pytest.raises(DatabaseWriteRefused, match="200 samples") as raised:
            writer.flush()
        assert "full" in str(raised.value)
        assert writer.pending == 200


def test_full_disk_exits_4_in_one_line(tmpfs: Path) -> None:
    url = _fresh_sqlite(tmpfs)
    _fill(tmpfs)
    result = evalsvc(
        "endpoints", "add", "x" * 100, "http://127.0.0.1:9/v1" + "/p" * 500, "--database-url", url
    )
    assert_one_line_error(result, 4, "refuses writes", "full")


# ---------------------------------------------------------------- the API server


def test_api_serve_on_a_busy_port_exits_4_in_one_line(sqlite_url: str) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        # A real process: in this one, `api serve` would raise RLIMIT_NOFILE (other tests read it).
        result = run_cli_process(
            "api",
            "serve",
            "--port",
            str(port),
            "--database-url",
            sqlite_url,
            env={"EVALSVC_API_AUTH": "on"}, timeout=120,
        )
    assert_one_line_error(result, 4, f"cannot listen on 127.0.0.1:{port}", "in use")


def test_schedule_spec_file_follows_the_yaml_rules(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(billion_laughs().replace("description:", "labels:"))
    url = _fresh_sqlite(tmp_path)
    result = evalsvc(
        "schedules", "add", "nightly", "--cron", "0 3 * * *", "--spec", str(spec),
        "--database-url", url,
    )  # fmt: skip
    assert_one_line_error(result, 2, "aliases")
