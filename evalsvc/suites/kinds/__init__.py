"""Built-in suite kinds; importing this package registers them."""

from evalsvc.suites.kinds import (  # noqa: F401
    determinism,
    drift,
    lmeval,
    needle,
    reasoning,
    speed,
)
