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


class DatabaseConfigError(StoreError):
    """The database URL is malformed or names a driver that is not installed (exit 2)."""


class DatabaseWriteRefused(StoreError):
    """The database refuses writes: read-only, or its disk is full. Not transient on the scale
    of a retry loop, so never retried: callers stop and say so (exit 4, HTTP 503)."""


class InvalidData(StoreError, ValueError):
    """A value the database cannot store (too long, out of range, NUL in text). Input is
    validated before it reaches the store; this is the backstop that keeps it a 422, not a 500."""
