"""The sweep's picture: quality Δ against capacity gain, both with their CIs, frontier drawn.

Contract: ``scatter_svg(report)`` turns a sweep report (``evalsvc.services.sweeps``) into a
self-contained SVG document (no script, no external resource): x = capacity ratio at SLO with its
interval as a horizontal bar, y = the worst quality Δ (oriented so higher is better) with its
interval as a vertical bar, the reference lines x = 1 (baseline capacity) and y = 0 (no quality
change), the Pareto frontier as a line through its configurations, the recommendation ringed.
Configurations lacking either value are listed under the plot instead of being placed. Every
text is escaped.
"""

from __future__ import annotations

from html import escape
from typing import Any

W, H = 640, 420
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 30, 70


def _points(report: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    placed, missing = [], []
    for c in report.get("configs") or []:
        cap = ((c.get("speed") or {}).get("capacity") or {})
        ratio, qd = cap.get("ratio"), c.get("quality_delta")
        if ratio is None or qd is None:
            missing.append(f"{c['name']} ({c.get('status')}"
                           + (", no capacity ratio" if ratio is None else "")
                           + (", no quality Δ" if qd is None else "") + ")")
            continue
        ci = cap.get("ci") or [ratio, ratio]
        qci = c.get("quality_ci") or [qd, qd]
        placed.append({
            "name": c["name"], "x": ratio, "x_lo": ci[0] if ci[0] is not None else ratio,
            "x_hi": ci[1] if ci[1] is not None else ratio, "y": qd,
            "y_lo": qci[0] if qci[0] is not None else qd,
            "y_hi": qci[1] if qci[1] is not None else qd,
        })
    return placed, missing


def _span(lo: float, hi: float) -> tuple[float, float]:
    if hi - lo < 1e-9:
        lo, hi = lo - 0.5, hi + 0.5
    pad = 0.08 * (hi - lo)
    return lo - pad, hi + pad


def scatter_svg(report: dict[str, Any]) -> str:
    placed, missing = _points(report)
    frontier = set(report.get("frontier") or [])
    best = (report.get("recommendation") or {}).get("config")
    xs = [1.0] + [v for p in placed for v in (p["x_lo"], p["x_hi"])]
    ys = [0.0] + [v for p in placed for v in (p["y_lo"], p["y_hi"])]
    x0, x1 = _span(min(xs), max(xs))
    y0, y1 = _span(min(ys), max(ys))
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def sx(v: float) -> float:
        return LEFT + (v - x0) / (x1 - x0) * pw

    def sy(v: float) -> float:
        return TOP + (1 - (v - y0) / (y1 - y0)) * ph

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
        f'viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">',
        f'<title>{escape("Quality Δ vs capacity at SLO")}</title>',
        f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>',
        f'<line class="ref" x1="{sx(1):.1f}" y1="{TOP}" x2="{sx(1):.1f}" y2="{TOP + ph}" '
        'stroke="#bbb" stroke-dasharray="4 3"/>',
        f'<line class="ref" x1="{LEFT}" y1="{sy(0):.1f}" x2="{LEFT + pw}" y2="{sy(0):.1f}" '
        'stroke="#bbb" stroke-dasharray="4 3"/>',
    ]
    for k in range(5):
        xv, yv = x0 + (x1 - x0) * k / 4, y0 + (y1 - y0) * k / 4
        out.append(f'<text x="{sx(xv):.1f}" y="{TOP + ph + 16}" text-anchor="middle">'
                   f'{xv:.2f}</text>')
        out.append(f'<text x="{LEFT - 6}" y="{sy(yv) + 4:.1f}" text-anchor="end">{yv:+.3f}</text>')
    out.append(f'<text x="{LEFT + pw / 2}" y="{H - 30}" text-anchor="middle">'
               f'{escape("capacity at SLO, candidate ÷ baseline (CI from ABBA repetitions)")}</text>')
    out.append(f'<text x="14" y="{TOP + ph / 2}" text-anchor="middle" '
               f'transform="rotate(-90 14 {TOP + ph / 2})">'
               f'{escape("worst quality Δ (higher is better, CI)")}</text>')
    front = sorted((p for p in placed if p["name"] in frontier), key=lambda p: p["x"])
    if len(front) > 1:
        pts = " ".join(f"{sx(p['x']):.1f},{sy(p['y']):.1f}" for p in front)
        out.append(f'<polyline class="frontier" points="{pts}" fill="none" stroke="#d62728" '
                   'stroke-width="2"/>')
    for p in placed:
        cx, cy = sx(p["x"]), sy(p["y"])
        name = escape(p["name"])
        out.append(f'<g class="config" data-name="{name}">')
        out.append(f'<line class="xci" x1="{sx(p["x_lo"]):.1f}" y1="{cy:.1f}" '
                   f'x2="{sx(p["x_hi"]):.1f}" y2="{cy:.1f}" stroke="#1f77b4"/>')
        out.append(f'<line class="yci" x1="{cx:.1f}" y1="{sy(p["y_lo"]):.1f}" '
                   f'x2="{cx:.1f}" y2="{sy(p["y_hi"]):.1f}" stroke="#1f77b4"/>')
        fill = "#d62728" if p["name"] in frontier else "#1f77b4"
        out.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="5" fill="{fill}"/>')
        if p["name"] == best:
            out.append(f'<circle class="recommended" cx="{cx:.1f}" cy="{cy:.1f}" r="10" '
                       'fill="none" stroke="#2ca02c" stroke-width="2"/>')
        out.append(f'<text x="{cx + 8:.1f}" y="{cy - 8:.1f}">{name}</text></g>')
    if missing:
        out.append(f'<text class="missing" x="{LEFT}" y="{H - 10}">'
                   f'{escape("not placed: " + "; ".join(missing))}</text>')
    out.append("</svg>")
    return "\n".join(out)
