"""Built-in suite kinds; importing this package registers them."""

from evalsvc.suites.kinds import needle  # noqa: F401
