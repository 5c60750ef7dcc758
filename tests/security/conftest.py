"""The security tests reuse the REST API tests' real server, tokens and store, on SQLite and
PostgreSQL (``EVALSVC_TEST_DATABASE_URL``); workers run the real executor."""

from tests.api.conftest import Api, api, api_db_url, server_url  # noqa: F401  (pytest fixtures)
from tests.fixtures.db import pg_session_url, sqlite_template  # noqa: F401  (pytest fixtures)
