"""The runner: executes suites against endpoints and gates the results (no database access).

Contract: ``execute`` takes a sample sink and the keys already stored; it probes, checks
capabilities, plans, sends, and returns a ``RunResult``. The service layer persists.
"""

from evalsvc.runner._common import CancelledRun, CapabilityError, InfrastructureError
from evalsvc.runner._runner import (
    CandidateResult,
    HelperProbe,
    NullProgress,
    Progress,
    RunResult,
    SampleSink,
    SkippedSuite,
    SuiteResult,
    check_capabilities,
    execute,
    gate_samples,
    probe_all,
    role_of,
    runnable_suites,
)

__all__ = [
    "CancelledRun",
    "CandidateResult",
    "CapabilityError",
    "HelperProbe",
    "InfrastructureError",
    "NullProgress",
    "Progress",
    "RunResult",
    "SampleSink",
    "SkippedSuite",
    "SuiteResult",
    "check_capabilities",
    "execute",
    "gate_samples",
    "probe_all",
    "role_of",
    "runnable_suites",
]
