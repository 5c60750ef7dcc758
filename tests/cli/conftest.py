from tests.fixtures.db import (  # noqa: F401  (pytest fixtures)
    empty_db_url,
    pg_session_url,
)
