"""The report's ``baseline_reuse`` as lines, for the Markdown report, the terminal and the
dashboard: which suites reused a blessed baseline (its id, run, age and the noise floor it
measured) and which re-ran the baseline although a blessing exists (stale, or its key changed;
the run's ``warnings`` say how to refresh it). Plain text: callers escape it for their medium.
"""

from __future__ import annotations

from typing import Any


def human_age(seconds: float) -> str:
    """An age for people: minutes under an hour, hours under two days, then days."""
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def noise_text(noise: dict[str, Any] | None) -> str:
    """A blessing's between-run noise floor, or "" when it aggregates one run."""
    if not noise or noise.get("sd") is None:
        return ""
    return (f"noise floor over {noise['runs']} baseline runs: SD {noise['sd']:.4f} of the mean, "
            f"discordance {noise['discordance']:.3f} (max {noise['discordance_max']:.3f})")


def reuse_lines(report: dict[str, Any]) -> list[str]:
    """One line per suite a blessing concerns; [] for reports without ``baseline_reuse``."""
    out = []
    for e in report.get("baseline_reuse") or []:
        status = e.get("status")
        if status not in ("reused", "stale", "changed"):
            continue
        age = human_age(float(e.get("age_s") or 0))
        if status == "reused":
            floor = noise_text(e.get("noise"))
            out.append(f"{e['suite']}: baseline reused from blessing {e['blessing_id']} "
                       f"(run {e['blessed_run']}, blessed {age} ago, {e.get('items_reused')} "
                       f"items, no baseline request)" + (f"; {floor}" if floor else ""))
        else:
            why = "stale" if status == "stale" else f"{e.get('changed')} changed"
            out.append(f"{e['suite']}: baseline run again, blessing {e['blessing_id']} not used "
                       f"({why}; blessed {age} ago)")
    return out
