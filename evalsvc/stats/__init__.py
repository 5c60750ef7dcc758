"""Statistics for paired baseline-vs-candidate evaluation.

Contract: pure functions over arrays and counts — no I/O, no database, no network, no global
state (randomness only through an explicit ``seed``). Inputs are validated (NaN/inf raise
``ValueError`` with positions). It depends on numpy and scipy only and calls nothing else in
evalsvc; :mod:`evalsvc.gates` builds the verdicts on top of it.

Every function names its test and the reference for its formula in its docstring, and is checked
in ``tests/stats`` against scipy/statsmodels, a published worked example, or an independent
numerical computation, plus seeded calibration simulations.

Conventions: differences are ``candidate − baseline``; a ``MarginTest``/result carries two
one-sided p-values, ``p_greater`` (H0: Δ ≤ null_value) and ``p_less`` (H0: Δ ≥ null_value);
interval functions take a two-sided ``alpha`` (``1 − alpha`` coverage) whose ends are one-sided
``alpha/2`` bounds.

scipy is imported inside the functions that compute with it (``import scipy``, whose own lazy
loading reaches ``scipy.stats``, ``scipy.special`` and ``scipy.optimize`` on first use), never
at module level: a process that computes no statistic (a refused command, ``evalsvc runs list``,
``evalsvc suites list``, a server's start) does not pay the 2 CPU-seconds ``import scipy.stats``
takes on a 2-core host (tests/test_layers.py and tests/cli/test_startup_imports.py keep it so).
"""

from evalsvc.stats._binary import (
    TANGO_CONTINUITY,
    TANGO_MAX_SKEW,
    PairedBinaryCounts,
    mcnemar_exact,
    miettinen_nurminen_ci,
    miettinen_nurminen_statistic,
    miettinen_nurminen_test,
    newcombe_paired_ci,
    newcombe_unpaired_ci,
    paired_binary_counts,
    tango_ci,
    tango_statistic,
    tango_test,
    wilson_interval,
)
from evalsvc.stats._cluster import ClusterRobustResult, cluster_ids, cluster_robust_mean
from evalsvc.stats._common import FloatArray, MarginTest, as_binary_vector, as_vector, check_alpha
from evalsvc.stats._continuous import (
    BootstrapResult,
    MeanTest,
    bootstrap_mean,
    t_test_mean,
    welch_test,
    wilcoxon_signed_rank,
)
from evalsvc.stats._effective_length import (
    EFFECTIVE_RATIO,
    EffectiveLengthTest,
    effective_length,
    effective_length_test,
    scores_by_length,
)
from evalsvc.stats._multiple import holm, weighted_holm
from evalsvc.stats._power import (
    mde_mean,
    mde_paired_binary,
    mde_two_proportions,
    min_n_flip_free,
    power_paired_binary,
    required_n,
    required_n_mean,
)
from evalsvc.stats._ratio import (
    RatioResult,
    RatioTest,
    bootstrap_ratio_ci,
    fieller_ratio_ci,
    ratio_test,
)
from evalsvc.stats._retention import (
    RetentionTest,
    quieter_than_floor,
    retention_mde,
    retention_min_clusters,
    retention_required_n,
    retention_t,
    retention_test,
)
from evalsvc.stats._sampled import (
    VarianceComponents,
    pass_at_k,
    required_items_sampled,
    samples_for_items,
    samples_knee,
    t_interval,
    variance_components,
)
from evalsvc.stats._sequential import (
    SequentialSimulation,
    confidence_sequence,
    sequential_decision,
    simulate_sample_use,
)

__all__ = [
    "EFFECTIVE_RATIO",
    "TANGO_CONTINUITY",
    "TANGO_MAX_SKEW",
    "BootstrapResult",
    "ClusterRobustResult",
    "EffectiveLengthTest",
    "FloatArray",
    "MarginTest",
    "MeanTest",
    "PairedBinaryCounts",
    "RetentionTest",
    "RatioResult",
    "RatioTest",
    "SequentialSimulation",
    "as_binary_vector",
    "as_vector",
    "bootstrap_mean",
    "bootstrap_ratio_ci",
    "check_alpha",
    "cluster_ids",
    "cluster_robust_mean",
    "confidence_sequence",
    "fieller_ratio_ci",
    "holm",
    "retention_mde",
    "retention_min_clusters",
    "retention_required_n",
    "retention_t",
    "retention_test",
    "quieter_than_floor",
    "weighted_holm",
    "mcnemar_exact",
    "mde_mean",
    "mde_paired_binary",
    "mde_two_proportions",
    "min_n_flip_free",
    "miettinen_nurminen_ci",
    "miettinen_nurminen_statistic",
    "miettinen_nurminen_test",
    "newcombe_paired_ci",
    "newcombe_unpaired_ci",
    "paired_binary_counts",
    "power_paired_binary",
    "ratio_test",
    "required_n",
    "required_n_mean",
    "sequential_decision",
    "simulate_sample_use",
    "t_test_mean",
    "tango_ci",
    "tango_statistic",
    "tango_test",
    "welch_test",
    "wilcoxon_signed_rank",
    "wilson_interval",
    "effective_length",
    "effective_length_test",
    "scores_by_length",
    "VarianceComponents",
    "pass_at_k",
    "required_items_sampled",
    "samples_for_items",
    "samples_knee",
    "t_interval",
    "variance_components",
]
