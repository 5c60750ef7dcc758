"""Domain errors raised by the store. Callers never see SQLAlchemy or driver exceptions."""

from __future__ import annotations


class StoreError(Exception):
    """Any failure of the store that is not one of the more specific errors below."""


class DatabaseUnavailable(StoreError):
    """The database could not be reached or is busy; the operation may succeed if retried."""


class DatabaseNotAtHead(StoreError):
    """The schema is not at the migration head; the message says which command to run."""


class Conflict(StoreError, ValueError):
    """A uniqueness or integrity rule was violated (e.g. a duplicate name)."""
