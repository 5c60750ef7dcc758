"""Errors of the local-endpoint machinery; each carries the CLI exit status it maps to.

Contract: the message is one line, fit to print after ``error:``; details (log tails) have
already been written to stderr by the code that raises.
"""

from __future__ import annotations


class LocalError(RuntimeError):
    """Infrastructure failure: a preparation step or a server that will not start (exit 4)."""

    exit_code: int = 4


class UnknownCandidateError(LocalError, ValueError):
    """A candidate name that is not in ``CANDIDATES`` (a usage error, exit 2)."""

    exit_code = 2
