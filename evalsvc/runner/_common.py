"""What the runner and the calibration pilot share: the run's error types and the in-flight
bound of a suite (a module of its own so that ``_runner`` and ``_pilot`` import it, not each
other)."""

from __future__ import annotations

from evalsvc.domain import RunOptions
from evalsvc.suites import Suite


class InfrastructureError(RuntimeError):
    """An endpoint is unreachable, or too many requests failed to trust a verdict (exit 4)."""


class CapabilityError(ValueError):
    """A suite needs an API feature that an endpoint does not have (exit 2)."""


class EndpointUrlError(CapabilityError):
    """An endpoint URL reaches a server but not its OpenAI API (``/v1`` missing); ``str()``
    names the corrected URL. Refused like a missing capability (exit 2), not as unreachable."""


class CancelledRun(RuntimeError):
    """The run was cancelled (or its lease lost) while executing."""


def suite_concurrency(suite: Suite, options: RunOptions) -> int:
    """In-flight bound for ``suite``: ``--concurrency``, or the suite's own traffic shape if larger."""
    return max(options.concurrency, suite.traffic_concurrency())
