"""The store front: one ``Store`` per database, one store per aggregate behind it.

Contract: methods take and return domain objects (``evalsvc.domain``) or plain dicts; ORM rows
never leave this package. Each method is one transaction (``Database.session``), and raises only
``evalsvc.db`` errors (``DatabaseUnavailable`` is the transient one worth retrying). Methods do
not retry by themselves; ``retry_transient`` and ``SampleWriter`` do, where a caller wants it.

The aggregates (``store.runs``, ``.samples``, ``.queue``, ``.endpoints``, ``.schedules``,
``.tokens``, ``.sweeps``, ``.log_uploads``, ``.alerts``) share the store's ``Database``; the front
re-exports their methods under the names callers have always used (``store.create_run`` is
``store.runs.create_run``) and owns the schema (migrations, readiness).
"""

from __future__ import annotations

from types import TracebackType

import sqlalchemy as sa

from evalsvc.settings import Settings

from . import _migrate
from ._alerts import AlertStore
from ._blessed import BlessedStore
from ._dashboard_queries import DashboardQueries
from ._errors import DatabaseNotAtHead, DatabaseUnavailable
from ._queue import QueueStore
from ._registry import EndpointRegistry
from ._rows import run_info, sample
from ._runs import RunStore
from ._samples import SampleStore
from ._schedules import ScheduleStore
from ._session import Database, redact_url
from ._sweeps import SweepStore
from ._tokens import API_SCOPES, TokenStore
from ._uploads import LogUploadStore

__all__ = ["API_SCOPES", "Store"]


class Store:
    """Persistent state of evalsvc on SQLite (embedded) or PostgreSQL (service)."""

    def __init__(self, url: str, *, endpoint_max_runs: int | None = None) -> None:
        self._db = Database(url)
        self.url = url
        max_runs = Settings().endpoint_max_runs if endpoint_max_runs is None else endpoint_max_runs
        self.runs = RunStore(self._db)
        self.samples = SampleStore(self._db)
        self.queue = QueueStore(self._db, endpoint_max_runs=max_runs)
        self.endpoints = EndpointRegistry(self._db)
        self.schedules = ScheduleStore(self._db)
        self.tokens = TokenStore(self._db)
        self.sweeps = SweepStore(self._db)
        self.log_uploads = LogUploadStore(self._db)
        self.blessed = BlessedStore(self._db)
        self.alerts = AlertStore(self._db)
        # The front's names for the aggregates' methods (bound methods: typed as the originals).
        runs, samples, queue = self.runs, self.samples, self.queue
        self.create_run, self.get_run, self.find_run_ids = (
            runs.create_run, runs.get_run, runs.find_run_ids
        )
        self.list_runs, self.update_progress, self.finish_run = (
            runs.list_runs, runs.update_progress, runs.finish_run
        )
        self.cancel_run, self.delete_run = runs.cancel_run, runs.delete_run
        self.reopen_run, self.requeue_run = runs.reopen_run, runs.requeue_run
        self.save_endpoint_snapshot = runs.save_endpoint_snapshot
        self.get_endpoint_snapshots = runs.get_endpoint_snapshots
        self.get_endpoint_identities = runs.get_endpoint_identities
        self.save_suite_snapshot = runs.save_suite_snapshot
        self.get_suite_snapshots = runs.get_suite_snapshots
        self.save_gate_results, self.get_gate_results = runs.save_gate_results, runs.get_gate_results
        self.save_report, self.get_report = runs.save_report, runs.get_report
        self.add_samples, self.get_samples = samples.add_samples, samples.get_samples
        self.count_samples, self.done_keys = samples.count_samples, samples.done_keys
        self.sample_page = samples.sample_page
        self.claim_run, self.heartbeat, self.release_run = (
            queue.claim_run, queue.heartbeat, queue.release_run
        )
        self.reap_expired, self.count_runs_by_status, self.running_counts = (
            queue.reap_expired, queue.count_runs_by_status, queue.running_counts
        )
        self.busy_workers = queue.busy_workers
        e = self.endpoints
        self.upsert_endpoint, self.create_endpoint = e.upsert_endpoint, e.create_endpoint
        self.get_endpoint, self.list_endpoints = e.get_endpoint, e.list_endpoints
        self.delete_endpoint = e.delete_endpoint
        s = self.schedules
        self.add_schedule, self.list_schedules = s.add_schedule, s.list_schedules
        self.get_schedule, self.remove_schedule = s.get_schedule, s.remove_schedule
        self.fire_due_schedules = s.fire_due_schedules
        t = self.tokens
        self.create_api_token, self.verify_api_token = t.create_api_token, t.verify_api_token
        self.list_api_tokens, self.revoke_api_token = t.list_api_tokens, t.revoke_api_token

    @classmethod
    def from_url(cls, url: str | None = None, *, endpoint_max_runs: int | None = None) -> Store:
        """A store for ``url`` (None: ``Settings().database_url``). Does not connect yet."""
        return cls(url or Settings().database_url, endpoint_max_runs=endpoint_max_runs)

    @property
    def endpoint_max_runs(self) -> int:
        """Running runs allowed per endpoint URL (the queue's claim budget)."""
        return self.queue.endpoint_max_runs

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self._db.dialect

    @property
    def display_url(self) -> str:
        return redact_url(self.url)

    @property
    def dashboard(self) -> DashboardQueries:
        """The web dashboard's read-only queries (``_dashboard_queries``)."""
        return DashboardQueries(self._db, run_info, sample)

    def close(self) -> None:
        self._db.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ------------------------------------------------------------------ the schema

    def current_revision(self) -> str | None:
        with self._db.connection() as conn:
            return _migrate.current_revision(conn)

    def head_revision(self) -> str:
        return _migrate.head_revision()

    def check_at_head(self) -> None:
        """Raise DatabaseNotAtHead unless the schema is at the migration head (connects)."""
        current, head = self.current_revision(), self.head_revision()
        self._refuse_unknown_revision(current, head)
        if current != head:
            raise DatabaseNotAtHead(
                f"database {self.display_url} at {current or 'no revision (empty)'}, head is "
                f"{head}: run `evalsvc db upgrade`"
            )

    def check_writable(self) -> None:
        """Raise ``DatabaseWriteRefused`` when the database refuses writes (read-only, disk
        full): a committed no-op update of the revision row, which needs the write path (lock,
        journal or WAL) but changes nothing. A writer holding the lock is not a refusal
        (``DatabaseUnavailable`` is swallowed: the database is busy, not broken)."""
        try:
            with self._db.session() as session:
                if self._db.dialect == "postgresql":  # never queue behind a migration for long
                    session.execute(sa.text("SET LOCAL lock_timeout = '2s'"))
                session.execute(sa.text("UPDATE alembic_version SET version_num = version_num"))
        except DatabaseUnavailable:
            return

    def check_known_revision(self) -> None:
        """Raise DatabaseNotAtHead when the database is at a revision this code does not know."""
        self._refuse_unknown_revision(self.current_revision(), self.head_revision())

    def _refuse_unknown_revision(self, current: str | None, head: str) -> None:
        if current is not None and current != head and not _migrate.is_known(current):
            raise DatabaseNotAtHead(
                f"database {self.display_url} is at revision {current}, which this evalsvc "
                f"does not know (its head is {head}): the database was migrated by a newer "
                "evalsvc; upgrade evalsvc instead of the database"
            )

    def upgrade(self, revision: str = "head") -> None:
        """Migrate the schema (``evalsvc db upgrade``); refuses a database newer than the code."""
        self._refuse_unknown_revision(self.current_revision(), self.head_revision())
        with self._db.connection() as conn:
            _migrate.upgrade(conn, revision)
            conn.commit()

    def downgrade(self, revision: str) -> None:
        with self._db.connection() as conn:
            _migrate.downgrade(conn, revision)
            conn.commit()

    def new_revision(self, message: str, *, autogenerate: bool = True) -> str:
        """(Developers) write a migration file, diffing the ORM against this database."""
        with self._db.connection() as conn:
            return _migrate.new_revision(conn, message, autogenerate=autogenerate)

    def is_empty(self) -> bool:
        """True when the database has no tables at all (never used by anything)."""
        with self._db.connection() as conn:
            return not sa.inspect(conn).get_table_names()

    def ensure_ready(self, *, upgrade_fresh_sqlite: bool = True) -> None:
        """Refuse a database not at head; first create the schema of a brand-new SQLite file.

        A fresh embedded database is created on the fly so that ``evalsvc compare`` works on
        first use. PostgreSQL and non-empty databases are never migrated implicitly: that is an
        operator's decision (``evalsvc db upgrade``).
        """
        if upgrade_fresh_sqlite and self._db.dialect == "sqlite" and self.is_empty():
            self.upgrade()
        self.check_at_head()
