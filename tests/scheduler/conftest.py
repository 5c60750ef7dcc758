from tests.fixtures.db import (  # noqa: F401  (pytest fixtures)
    db_url,
    empty_db_url,
    pg_session_url,
    pg_url,
    sqlite_template,
    store,
)
