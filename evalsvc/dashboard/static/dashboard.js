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
                 fail: "#cf222e", inconclusive: "#9a6700", error: "#6e7781" };

  function chart(name, option) {
    var el = document.querySelector('[data-chart="' + name + '"]');
    if (!el || typeof echarts === "undefined") return null;
    var c = echarts.init(el, null, { renderer: "canvas" });
    option.animation = false;
    c.setOption(option);
    el.setAttribute("data-rendered", "1");
    window.addEventListener("resize", function () { c.resize(); });
    return c;
  }

  function pct(x) { return x == null ? null : Math.round(1000 * x) / 10; }

  function barPair(name, title, labels, base, cand, yName) {
    return chart(name, {
      title: { text: title, textStyle: { fontSize: 13 } },
      tooltip: { trigger: "axis" },
      legend: { top: 22, right: 0 },
      grid: { left: 50, right: 10, top: 60, bottom: 60 },
      xAxis: { type: "category", data: labels, axisLabel: { rotate: labels.length > 6 ? 30 : 0 } },
      yAxis: { type: "value", name: yName },
      series: [
        { name: "baseline", type: "bar", data: base, itemStyle: { color: COLORS.baseline } },
        { name: "candidate", type: "bar", data: cand, itemStyle: { color: COLORS.candidate } }
      ]
    });
  }

  function lineByLevel(name, title, levels, key, sub, yName) {
    function val(side, lv) {
      var m = lv[side] || {};
      var v = sub ? (m[key] || {})[sub] : m[key];
      return v == null ? null : v;
    }
    var xs = levels.map(function (lv) { return String(lv.concurrency); });
    return chart(name, {
      title: { text: title, textStyle: { fontSize: 13 } },
      tooltip: { trigger: "axis" },
      legend: { top: 22, right: 0 },
      grid: { left: 55, right: 10, top: 60, bottom: 40 },
      xAxis: { type: "category", name: "concurrency", nameLocation: "middle", nameGap: 25, data: xs },
      yAxis: { type: "value", name: yName },
      series: ["baseline", "candidate"].map(function (side) {
        return { name: side, type: "line", symbolSize: 8,
                 data: levels.map(function (lv) { return val(side, lv); }),
                 itemStyle: { color: COLORS[side] }, lineStyle: { color: COLORS[side] } };
      })
    });
  }

  function suiteCharts(view) {
    var d = view.details || {};
    if (view.kind === "reasoning" && d.by_task) {
      var labels = d.by_task.map(function (r) { return r.family + " L" + r.level; });
      barPair("reasoning-accuracy", "Accuracy by family and level (%)", labels,
        d.by_task.map(function (r) { return pct(r.baseline); }),
        d.by_task.map(function (r) { return pct(r.candidate); }), "%");
      chart("reasoning-flips", {
        title: { text: "Flips by family and level", textStyle: { fontSize: 13 } },
        tooltip: { trigger: "axis" }, legend: { top: 22, right: 0 },
        grid: { left: 50, right: 10, top: 60, bottom: 60 },
        xAxis: { type: "category", data: labels, axisLabel: { rotate: labels.length > 6 ? 30 : 0 } },
        yAxis: { type: "value", minInterval: 1 },
        series: [
          { name: "correct → incorrect", type: "bar", itemStyle: { color: COLORS.fail },
            data: d.by_task.map(function (r) { return r.correct_to_incorrect || 0; }) },
          { name: "incorrect → correct", type: "bar", itemStyle: { color: COLORS.pass },
            data: d.by_task.map(function (r) { return r.incorrect_to_correct || 0; }) }
        ]
      });
    }
    if (view.kind === "determinism") {
      var bc = (d.baseline || {}).conditions || {}, cc = (d.candidate || {}).conditions || {};
      var conds = Object.keys(bc);
      Object.keys(cc).forEach(function (c) { if (conds.indexOf(c) < 0) conds.push(c); });
      barPair("determinism-rate", "Identical to the batch-1 output, per condition (%)", conds,
        conds.map(function (c) { return pct((bc[c] || {}).identical_rate); }),
        conds.map(function (c) { return pct((cc[c] || {}).identical_rate); }), "%");
      var div = view.divergence || {};
      var series = [];
      ["baseline", "candidate"].forEach(function (side, si) {
        var fd = (div[side] || {}).first_divergence || {};
        var pts = [];
        conds.forEach(function (c, ci) {
          (fd[c] || []).forEach(function (pos, k) { pts.push([ci + (si ? 0.12 : -0.12), pos]); });
        });
        series.push({ name: side, type: "scatter", data: pts, symbolSize: 9,
                      itemStyle: { color: COLORS[side], opacity: 0.7 } });
      });
      chart("determinism-divergence", {
        title: { text: "First divergent token position (outputs that differ)", textStyle: { fontSize: 13 } },
        tooltip: { trigger: "item" }, legend: { top: 22, right: 0 },
        grid: { left: 50, right: 10, top: 60, bottom: 40 },
        xAxis: { type: "value", min: -1, max: Math.max(conds.length, 1), interval: 1,
                 axisLabel: { formatter: function (v) { return conds[v] || ""; } } },
        yAxis: { type: "value", name: "token", minInterval: 1 },
        series: series
      });
    }
    if (view.kind === "drift" && view.distribution) {
      var h = view.distribution.histogram || {};
      var edges = h.edges || [];
      var cats = [];
      for (var i = 0; i + 1 < edges.length; i++) {
        cats.push(edges[i].toExponential(1) + "–" + edges[i + 1].toExponential(1));
      }
      chart("drift-histogram", {
        title: { text: "KLD per position (nats, log-spaced bins)", textStyle: { fontSize: 13 } },
        tooltip: { trigger: "axis" },
        grid: { left: 50, right: 10, top: 40, bottom: 90 },
        xAxis: { type: "category", data: cats, axisLabel: { rotate: 45, fontSize: 10 } },
        yAxis: { type: "value", name: "positions" },
        series: [{ type: "bar", data: h.counts || [], itemStyle: { color: COLORS.candidate } }]
      });
    }
    if (view.kind === "speed" && d.levels) {
      lineByLevel("speed-throughput", "Output throughput (tok/s)", d.levels, "output_tok_s", null, "tok/s");
      lineByLevel("speed-ttft", "Time to first token, p50 (ms)", d.levels, "ttft_ms", "p50", "ms");
      lineByLevel("speed-itl", "Inter-token latency, p50 (ms)", d.levels, "itl_ms", "p50", "ms");
    }
  }

  function trendChart(t) {
    if (!t || !t.points || !t.points.length) return;
    var pts = t.points;
    var xs = pts.map(function (p) { return p.time.slice(0, 16).replace("T", " "); });
    var lows = pts.map(function (p) { return p.ci_low; });
    var widths = pts.map(function (p) {
      return p.ci_low == null || p.ci_high == null ? null : p.ci_high - p.ci_low;
    });
    var boundary = pts.length ? pts[pts.length - 1].boundary : null;
    var c = chart("trend", {
      tooltip: { trigger: "item", formatter: function (p) {
        var q = pts[p.dataIndex] || {};
        return xs[p.dataIndex] + "<br>Δ " + (q.delta == null ? "—" : q.delta.toFixed(3)) +
          " [" + (q.ci_low == null ? "—" : q.ci_low.toFixed(3)) + ", " +
          (q.ci_high == null ? "—" : q.ci_high.toFixed(3)) + "] · " + (q.verdict || "—");
      } },
      grid: { left: 60, right: 20, top: 20, bottom: 50 },
      xAxis: { type: "category", data: xs, boundaryGap: false },
      yAxis: { type: "value", name: "Δ", scale: true },
      series: [
        { name: "ci-low", type: "line", data: lows, stack: "ci", stackStrategy: "all", symbol: "none",
          lineStyle: { opacity: 0 }, silent: true, tooltip: { show: false } },
        { name: "CI", type: "line", data: widths, stack: "ci", stackStrategy: "all", symbol: "none",
          lineStyle: { opacity: 0 }, areaStyle: { color: "rgba(9,105,218,0.18)" }, silent: true,
          tooltip: { show: false } },
        { name: "Δ", type: "line", symbolSize: 11,
          data: pts.map(function (p) {
            return { value: p.delta, itemStyle: { color: COLORS[p.verdict] || COLORS.error } };
          }),
          lineStyle: { color: "#1f2328" },
          markLine: boundary == null ? undefined : {
            symbol: "none", silent: true, label: { formatter: "margin" },
            lineStyle: { color: COLORS.fail, type: "dashed" }, data: [{ yAxis: boundary }] } }
      ]
    });
    if (c) {
      c.on("click", function (p) {
        var q = pts[p.dataIndex];
        if (q && p.seriesName === "Δ") window.location.href = "/runs/" + encodeURIComponent(q.run_id);
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
              if (bar && p.planned) { bar.max = p.planned; bar.value = Math.min(p.done, p.planned); }
              if (count) count.textContent = p.done + (p.planned ? " / " + p.planned : "") + " items";
              var rows = el.querySelector("[data-progress-rows]");
              if (rows && p.rows) {
                while (rows.firstChild) rows.removeChild(rows.firstChild);
                p.rows.forEach(function (r) {
                  var tr = document.createElement("tr");
                  [r.suite, r.endpoint, r.done, r.errors, r.planned == null ? "—" : r.planned]
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
