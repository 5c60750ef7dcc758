"""The report's ``baseline_reuse`` as lines, for the Markdown report, the terminal and the
dashboard: which suites reused a blessed baseline (its id, run, the endpoint it was measured
on, age and the noise floor it measured) and which re-ran the baseline although a blessing
exists (stale, its key changed, blessed on another endpoint, or blessed before endpoints were
recorded; the entry's ``reason`` and the run's ``warnings`` say how to make it apply). Plain
text: callers escape it for their medium.
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
        if status not in ("reused", "stale", "changed", "other-endpoint", "unbound"):
            continue
        age = human_age(float(e.get("age_s") or 0))
        where = f"measured on {shown_endpoint(e['endpoint'])}, " if e.get("endpoint") else ""
        if status == "reused":
            floor = noise_text(e.get("noise"))
            out.append(f"{e['suite']}: baseline reused from blessing {e['blessing_id']} "
                       f"(run {e['blessed_run']}, {where}blessed {age} ago, "
                       f"{e.get('items_reused')} items, no baseline request)"
                       + (f"; {floor}" if floor else ""))
        elif status == "other-endpoint":
            out.append(f"{e['suite']}: baseline run again, blessing {e['blessing_id']} not used "
                       f"(blessed on {shown_endpoint(e.get('endpoint'))}; this run's baseline is "
                       f"{shown_endpoint(e.get('baseline_endpoint'))})")
        elif status == "unbound":
            out.append(f"{e['suite']}: baseline run again, blessing {e['blessing_id']} not used "
                       "(blessed before evalsvc recorded the endpoint it was measured on: "
                       "bless again)")
        else:
            why = "stale" if status == "stale" else f"{e.get('changed')} changed"
            out.append(f"{e['suite']}: baseline run again, blessing {e['blessing_id']} not used "
                       f"({why}; blessed {age} ago)")
    return out


def shown_endpoint(identity: str | None) -> str:
    """An endpoint identity (``evalsvc.services.identity``) as messages show it: a registered
    name as is, a URL as ``host:port`` (with its path when not the usual ``/v1``); ``None``
    (recorded before identities) as such."""
    if identity is None:
        return "an unrecorded endpoint"
    if "://" not in identity:
        return identity
    rest = identity.split("://", 1)[1]
    host, _, path = rest.partition("/")
    return host if path in ("", "v1") else f"{host}/{path}"
