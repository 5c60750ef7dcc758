"""The one mapping from an exception to an exit code (docs/cli.md, "Exit codes").

Contract: ``exit_code(exc)`` is 2 for a usage or configuration error (a bad value or option, an
unknown or ambiguous name or id, a taken name, a refused URL or token, a database URL that is no
URL, a schema not at the migration head, a run that cannot do what was asked) and 4 for an
infrastructure error (the database, an endpoint or the server unreachable or refusing; the run
interrupted; anything unforeseen). Never 1 or 3: those are verdicts
(``evalsvc.services.runs.exit_code``). Every command that turns an exception into an exit asks
this function; the exception classes of the heavier layers are imported only on that path.
"""

from __future__ import annotations

from evalsvc.db import Conflict, DatabaseConfigError, DatabaseNotAtHead, InvalidData, StoreError


def __getattr__(name: str) -> int:
    # EXIT_USAGE and EXIT_INFRA come from evalsvc.domain (its pydantic models cost about a
    # tenth of a CPU-second to import); every command module imports this one, and the ones
    # that need no domain object (`suites list`, `--version`) should not pay for them.
    if name in ("EXIT_USAGE", "EXIT_INFRA"):
        from evalsvc.domain import EXIT_CODES

        return EXIT_CODES["usage" if name == "EXIT_USAGE" else "error"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def exit_code(exc: BaseException) -> int:
    """2 (usage/configuration) or 4 (infrastructure) for ``exc``; see the module docstring."""
    from evalsvc.domain import EXIT_CODES

    EXIT_USAGE, EXIT_INFRA = EXIT_CODES["usage"], EXIT_CODES["error"]
    if isinstance(exc, StoreError):
        usage = isinstance(exc, Conflict | DatabaseNotAtHead | DatabaseConfigError | InvalidData)
        return EXIT_USAGE if usage else EXIT_INFRA
    if isinstance(exc, KeyboardInterrupt):  # Ctrl-C or SIGTERM: no verdict was reached
        return EXIT_INFRA
    # UsageError, CapabilityError, SuiteError, pydantic's ValidationError, UrlError (ValueErrors);
    # an unknown endpoint, schedule or run (LookupErrors).
    if isinstance(exc, ValueError | LookupError):
        return EXIT_USAGE
    from evalsvc.endpoints import EgressRefused
    from evalsvc.services.history import RunAlreadyFinished, RunNotFinished

    if isinstance(exc, EgressRefused | RunAlreadyFinished | RunNotFinished):
        return EXIT_USAGE
    return EXIT_INFRA
