"""The migration tree: one head, up/down/up on both backends, and no drift from the ORM."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from typer.testing import CliRunner

from evalsvc.cli.db import app as db_app
from evalsvc.db import DatabaseNotAtHead, Store
from evalsvc.db._migrate import MIGRATIONS_DIR, alembic_config
from evalsvc.db._orm import Base

EXPECTED_TABLES = {t.name for t in Base.metadata.sorted_tables}


def _tables(store: Store) -> set[str]:
    engine = sa.create_engine(store.url)
    try:
        return set(sa.inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def test_single_head() -> None:
    script = ScriptDirectory.from_config(alembic_config())
    assert len(script.get_heads()) == 1, script.get_heads()
    assert MIGRATIONS_DIR.is_dir() and (MIGRATIONS_DIR / "env.py").is_file()


def test_upgrade_downgrade_upgrade(empty_db_url: str) -> None:
    with Store.from_url(empty_db_url) as store:
        store.upgrade()
        assert _tables(store) == EXPECTED_TABLES
        store.check_at_head()
        store.downgrade("base")
        assert _tables(store) == set()
        assert store.current_revision() is None
        store.upgrade()
        assert _tables(store) == EXPECTED_TABLES
        assert store.current_revision() == store.head_revision()


def test_autogenerate_finds_no_difference(empty_db_url: str) -> None:
    with Store.from_url(empty_db_url) as store:
        store.upgrade()
    engine = sa.create_engine(empty_db_url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            diff = compare_metadata(context, Base.metadata)
    finally:
        engine.dispose()
    assert diff == []


def test_not_at_head_is_refused_with_the_command_to_run(empty_db_url: str) -> None:
    with (
        Store.from_url(empty_db_url) as store,
        pytest.raises(DatabaseNotAtHead, match=r"run `evalsvc db upgrade`"),
    ):
        store.check_at_head()


def test_ensure_ready_creates_only_a_fresh_sqlite_database(empty_db_url: str) -> None:
    with Store.from_url(empty_db_url) as store:
        if store.dialect == "sqlite":
            store.ensure_ready()
            store.check_at_head()
        else:
            with pytest.raises(DatabaseNotAtHead):
                store.ensure_ready()


def test_ensure_ready_refuses_an_old_sqlite_database(empty_db_url: str) -> None:
    with Store.from_url(empty_db_url) as store:
        store.upgrade()
        store.downgrade("base")  # leaves alembic_version: not fresh, just behind
        with pytest.raises(DatabaseNotAtHead, match="at no revision"):
            store.ensure_ready()


def test_cli_current_and_upgrade(empty_db_url: str) -> None:
    runner = CliRunner()
    result = runner.invoke(db_app, ["current", "--database-url", empty_db_url])
    assert result.exit_code == 1 and "behind" in result.output
    result = runner.invoke(db_app, ["upgrade", "--database-url", empty_db_url])
    assert result.exit_code == 0, result.output
    result = runner.invoke(db_app, ["current", "--database-url", empty_db_url])
    assert result.exit_code == 0 and "up to date" in result.output
    result = runner.invoke(db_app, ["downgrade", "base", "--database-url", empty_db_url])
    assert result.exit_code == 0 and "base" in result.output


def test_cli_unreachable_database_is_one_line() -> None:
    url = "postgresql+psycopg://postgres@127.0.0.1:1/nothing"
    result = CliRunner().invoke(db_app, ["current", "--database-url", url])
    assert result.exit_code == 4
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot use database")


def test_run_submitter_migration_keeps_existing_runs(empty_db_url: str) -> None:
    """0003 adds ``runs.submitted_by`` (issue 17 break 14): runs without one read None, and a
    downgrade drops only the column, keeping the runs."""
    from evalsvc.domain import EndpointRef, RunSpec

    spec = RunSpec(
        baseline=EndpointRef(url="http://127.0.0.1:9001/v1"),
        candidates=[EndpointRef(url="http://127.0.0.1:9002/v1")],
        suites=["needle-smoke"],
    )
    with Store.from_url(empty_db_url) as store:
        store.upgrade("0002")
        engine = sa.create_engine(empty_db_url)
        try:
            with engine.connect() as conn:
                columns = {c["name"] for c in sa.inspect(conn).get_columns("runs")}
        finally:
            engine.dispose()
        assert "submitted_by" not in columns
        store.upgrade()
        old = store.create_run(spec)
        new = store.create_run(spec, submitted_by="ci-token")
        assert store.get_run(old.id).submitted_by is None  # type: ignore[union-attr]
        assert store.get_run(new.id).submitted_by == "ci-token"  # type: ignore[union-attr]
        store.downgrade("0002")
        engine = sa.create_engine(empty_db_url)
        try:
            with engine.connect() as conn:
                ids = set(conn.execute(sa.text("SELECT id FROM runs")).scalars())
                columns = {c["name"] for c in sa.inspect(conn).get_columns("runs")}
        finally:
            engine.dispose()
        assert ids == {old.id, new.id} and "submitted_by" not in columns
        store.upgrade()


def test_endpoint_tokenizer_migration_keeps_registrations(empty_db_url: str) -> None:
    """0005 adds ``endpoints.tokenizer`` (issue 20): endpoints registered before read None, and
    a downgrade drops only the column, keeping the registrations."""
    with Store.from_url(empty_db_url) as store:
        store.upgrade("0004")
        engine = sa.create_engine(empty_db_url)
        try:
            with engine.begin() as conn:
                assert "tokenizer" not in {
                    c["name"] for c in sa.inspect(conn).get_columns("endpoints")
                }
                conn.execute(
                    sa.text(
                        "INSERT INTO endpoints (id, name, url, created_at, updated_at) VALUES "
                        "('e1', 'old', 'http://127.0.0.1:9001/v1', :t, :t)"
                    ),
                    {"t": "2026-12-01 00:00:00"},
                )
        finally:
            engine.dispose()
        store.upgrade()
        assert store.get_endpoint("old").tokenizer is None  # type: ignore[union-attr]
        store.upsert_endpoint(name="new", url="http://127.0.0.1:9002/v1", tokenizer="/m/t.json")
        assert store.get_endpoint("new").tokenizer == "/m/t.json"  # type: ignore[union-attr]
        store.downgrade("0004")
        engine = sa.create_engine(empty_db_url)
        try:
            with engine.connect() as conn:
                names = set(conn.execute(sa.text("SELECT name FROM endpoints")).scalars())
                columns = {c["name"] for c in sa.inspect(conn).get_columns("endpoints")}
        finally:
            engine.dispose()
        assert names == {"old", "new"} and "tokenizer" not in columns
        store.upgrade()
