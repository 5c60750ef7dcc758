/* evalsvc dashboard: charts (vendored ECharts) and live status polling.
 *
 * Page data comes from <script type="application/json"> elements (parsed, never evaluated) and
 * from /ui/live. Text from the server is only ever inserted with textContent, never innerHTML.
 */
(function () {
  "use strict";

  function pageData(id) {
    var el = document.getElementById(id || "page-data");
    if (!el) return null;
    try { return JSON.parse(el.textContent); } catch (e) { return null; }
  }

  var COLORS = { baseline: "#6e7781", candidate: "#0969da", pass: "#1a7f37",
                 fail: "#cf222e", inconclusive: "#9a6700", error: "#6e7781",
                 "non-comparable": "#8250df" };

  // Charts follow the page's theme (prefers-color-scheme; ECharts ships a "dark" theme).
  var dark = !!(window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches);

  function chart(name, option) {
    var el = document.querySelector('[data-chart="' + name + '"]');
    if (!el || typeof echarts === "undefined") return null;
    var c = echarts.init(el, dark ? "dark" : null, { renderer: "canvas" });
    if (dark) option.backgroundColor = "transparent";
    option.animation = false;
    c.setOption(option);
    el.setAttribute("data-rendered", "1");
    window.addEventListener("resize", function () { c.resize(); });
    return c;
  }

  function color(name) { return COLORS[name] || name; }

  /* A chart a suite kind declared (evalsvc.suites.Chart): bar or line over category labels,
   * or scatter points [label index, y]. The script knows no kind. */
  function kindChart(spec) {
    var labels = spec.labels || [];
    var scatter = spec.type === "scatter";
    var xAxis = scatter
      ? { type: "value", min: -1, max: Math.max(labels.length, 1), interval: 1, name: spec.x_name,
          axisLabel: { formatter: function (v) { return labels[v] || ""; } } }
      : { type: "category", data: labels, name: spec.x_name, nameLocation: "middle", nameGap: 28,
          axisLabel: { rotate: labels.length > 6 ? 30 : 0 } };
    return chart(spec.id, {
      title: { text: spec.title, textStyle: { fontSize: 13 } },
      tooltip: { trigger: scatter ? "item" : "axis" },
      legend: { top: 22, right: 0 },
      grid: { left: 55, right: 10, top: 60, bottom: 60 },
      xAxis: xAxis,
      yAxis: { type: "value", name: spec.y_name },
      series: (spec.series || []).map(function (s) {
        var c = color(s.color || "");
        var out = { name: s.name, type: spec.type, data: s.data || [] };
        if (c) {
          out.itemStyle = { color: c, opacity: scatter ? 0.7 : 1 };
          if (spec.type === "line") out.lineStyle = { color: c };
        }
        if (spec.type !== "bar") out.symbolSize = scatter ? 9 : 8;
        return out;
      })
    });
  }

  function suiteCharts(view) {
    ((view.kind_view || {}).charts || []).forEach(kindChart);
    (view.thinking_charts || []).forEach(kindChart);
  }

  /* The trend: Δ of every run on a time axis, its CI as a whisker (a single run has one too),
   * the margin as a dashed line inside the y-range the server computed (evalsvc.services.
   * dashboard.trend: every CI end, 0 and the margin). */
  function trendChart(t) {
    if (!t || !t.points || !t.points.length) return;
    var pts = t.points;
    var ms = pts.map(function (p) { return Date.parse(p.time); });
    var range = t.y_range || [null, null];
    var lo = range[0], hi = range[1];
    var tmin = Math.min.apply(null, ms), tmax = Math.max.apply(null, ms);
    // A margin of 8% of the runs' span (at least 30 s) either side, so no point sits on the
    // edge; one run, half an hour either side. A fixed half day spread two runs ten minutes
    // apart into one column in the middle of a day-wide axis.
    var span = tmax - tmin;
    var tpad = span > 0 ? Math.max(span * 0.08, 30 * 1000) : 30 * 60 * 1000;
    var boundary = pts[pts.length - 1].boundary;
    var fg = dark ? "#e6edf3" : "#1f2328";
    var ci = pts.map(function (p, i) {
      // A one-sided interval (threshold gates) runs to the edge of the drawn range.
      var a = p.ci_low == null ? lo : p.ci_low, b = p.ci_high == null ? hi : p.ci_high;
      return [ms[i], a, b, i];
    }).filter(function (d) { return d[1] != null && d[2] != null; });
    var c = chart("trend", {
      tooltip: { trigger: "item", formatter: function (p) {
        var q = pts[p.seriesName === "CI" ? p.value[3] : p.dataIndex] || {};
        return (q.time || "").slice(0, 19).replace("T", " ") + "<br>Δ " +
          (q.delta == null ? "—" : q.delta.toFixed(3)) + " [" +
          (q.ci_low == null ? "—" : q.ci_low.toFixed(3)) + ", " +
          (q.ci_high == null ? "—" : q.ci_high.toFixed(3)) + "] · " + (q.verdict || "—");
      } },
      grid: { left: 70, right: 30, top: 30, bottom: 50 },
      xAxis: { type: "time", name: "run time (UTC)", nameLocation: "middle", nameGap: 30,
               min: tmin - tpad, max: tmax + tpad },
      yAxis: { type: "value", name: t.y_name || "Δ", nameLocation: "middle", nameGap: 52,
               min: lo, max: hi, axisLabel: { formatter: function (v) { return v.toFixed(3); } } },
      series: [
        { name: "CI", type: "custom", data: ci, z: 1, encode: { x: 0, y: [1, 2] },
          renderItem: function (params, api) {
            var x = api.value(0);
            var top = api.coord([x, api.value(2)]), bottom = api.coord([x, api.value(1)]);
            var style = { stroke: COLORS.candidate, lineWidth: 2 };
            var w = 6;
            return { type: "group", children: [
              { type: "line", shape: { x1: top[0], y1: top[1], x2: bottom[0], y2: bottom[1] }, style: style },
              { type: "line", shape: { x1: top[0] - w, y1: top[1], x2: top[0] + w, y2: top[1] }, style: style },
              { type: "line", shape: { x1: bottom[0] - w, y1: bottom[1], x2: bottom[0] + w, y2: bottom[1] }, style: style }
            ] };
          } },
        { name: "Δ", type: "line", symbolSize: 11, z: 3,
          data: pts.map(function (p, i) {
            return { value: [ms[i], p.delta], itemStyle: { color: COLORS[p.verdict] || COLORS.error } };
          }),
          lineStyle: { color: fg },
          markLine: boundary == null ? undefined : {
            symbol: "none", silent: true,
            label: { formatter: "margin " + boundary.toFixed(3), position: "insideEndTop", color: COLORS.fail },
            lineStyle: { color: COLORS.fail, type: "dashed", width: 2 }, data: [{ yAxis: boundary }] } }
      ]
    });
    if (c) {
      c.on("click", function (p) {
        var q = p.seriesName === "Δ" ? pts[p.dataIndex] : null;
        if (q) window.location.href = "/runs/" + encodeURIComponent(q.run_id);
      });
    }
  }

  /* ---- live status: poll /ui/live while runs are queued or running ---- */
  function live() {
    var ids = pageData("live-ids");
    if (!ids || !ids.length) return;
    var delay = 1500;
    function tick() {
      var url = "/ui/live?ids=" + encodeURIComponent(ids.join(","));
      fetch(url, { credentials: "same-origin", cache: "no-store" })
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (data) {
          if (!data) return;
          var finished = false;
          ids.forEach(function (id) {
            var s = data[id];
            if (!s) return;
            document.querySelectorAll('[data-live="' + id + '"]').forEach(function (el) {
              var st = el.querySelector("[data-status]") || document.querySelector('[data-run="' + id + '"] [data-status]');
              if (st) { st.textContent = s.status; st.className = "status s-" + s.status; }
              var bar = el.querySelector("[data-progress]");
              var count = el.querySelector("[data-count]");
              var p = s.progress || {};
              if (bar && p.fraction != null) { bar.max = 1000; bar.value = Math.round(1000 * p.fraction); }
              if (count) count.textContent = p.summary || (p.done + (p.planned ? " / " + p.planned : "") + " items");
              var rows = el.querySelector("[data-progress-rows]");
              if (rows && p.rows) {
                while (rows.firstChild) rows.removeChild(rows.firstChild);
                p.rows.forEach(function (r) {
                  var tr = document.createElement("tr");
                  [r.suite, r.label || r.endpoint, r.done, r.errors, r.planned == null ? "—" : r.planned]
                    .forEach(function (v) {
                      var td = document.createElement("td");
                      td.textContent = String(v);
                      tr.appendChild(td);
                    });
                  rows.appendChild(tr);
                });
              }
            });
            if (s.status !== "queued" && s.status !== "running") finished = true;
          });
          // A run that finished has gates and a report now: show them.
          if (finished && document.getElementById("gates") === null && document.getElementById("progress")) {
            window.location.reload();
            return;
          }
          if (finished && document.getElementById("runs")) { window.location.reload(); return; }
          window.setTimeout(tick, delay);
        })
        .catch(function () { window.setTimeout(tick, delay * 4); });
    }
    window.setTimeout(tick, delay);
  }

  document.addEventListener("DOMContentLoaded", function () {
    var data = pageData();
    if (data && data.kind) suiteCharts(data);
    if (data && data.points) trendChart(data);
    var pick = document.getElementById("pick");
    if (pick) pick.addEventListener("change", function () { window.location.search = "?" + pick.value; });
    live();
  });
})();
