/* The Conduit pages in the browser, part 3 of 5: the recovery timeline. Each run a bar on a time axis
 * (coloured by how it ended), its faults as diamonds, the backoff waits between runs hatched. Needs
 * common.js (window.Conduit).
 */
(function (C) {
  "use strict";

  var $ = C.$;
  var el = C.el;
  var clear = C.clear;
  var parseTime = C.parseTime;
  var fmtTime = C.fmtTime;
  var fmtSeconds = C.fmtSeconds;

  var TICK_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800];

  function runTitle(run, start, end) {
    var lines = [
      "Run " + fmtTime(start) + " \u2013 " + (run.ended_at ? fmtTime(end) : "now") + " UTC (" + fmtSeconds((end - start) / 1000) + ")",
      "Ended: " + (run.end || "unknown") + (run.mode ? ", mode " + run.mode : ""),
    ];
    if (run.attempt) lines.push("Restart attempt " + run.attempt);
    if (run.airflow && run.airflow.dag_id) {
      lines.push("Airflow: " + run.airflow.dag_id + " / " + run.airflow.run_id + " / " + run.airflow.task_id + (run.airflow.try_number ? " (try " + run.airflow.try_number + ")" : ""));
    }
    (run.faults || []).forEach(function (f) {
      lines.push("Fault: " + faultText(f));
    });
    return lines.join("\n");
  }

  function faultText(f) {
    var t = [f.kind, f.code].filter(Boolean).join(" ");
    if (f.node) t += " at " + f.node;
    if (f.message) t += ": " + f.message;
    var ms = parseTime(f.time);
    if (ms) t += " (" + fmtTime(ms, false) + ")";
    return t;
  }

  function renderTimeline(data, nowIso) {
    var box = clear($("timeline"));
    var runs = ((data && data.runs) || []).slice().sort(function (a, b) {
      return (parseTime(a.started_at) || 0) - (parseTime(b.started_at) || 0);
    });
    var summary = $("runs-summary");
    if (!runs.length) {
      box.appendChild(el("p", { className: "muted", text: "No runs yet." }));
      summary.textContent = "";
      $("timeline-span").textContent = "";
      return runs;
    }
    var now = parseTime(nowIso) || Date.now();
    var lo = Infinity;
    var hi = -Infinity;
    runs.forEach(function (r) {
      var s = parseTime(r.started_at);
      var e = parseTime(r.ended_at) || (r.end === "running" || r.end === "recovering" ? now : s);
      if (s !== null) lo = Math.min(lo, s);
      hi = Math.max(hi, e || s || lo);
      if (r.backoff) hi = Math.max(hi, parseTime(r.backoff.until) || hi);
      (r.faults || []).forEach(function (f) {
        var t = parseTime(f.time);
        if (t) hi = Math.max(hi, t);
      });
    });
    if (!isFinite(lo)) lo = now;
    if (!(hi > lo)) hi = lo + 1000;
    var pad = (hi - lo) * 0.02;
    lo -= pad;
    hi += pad;
    var span = hi - lo;
    function pct(ms) {
      return (((ms - lo) / span) * 100).toFixed(3) + "%";
    }
    function width(a, b) {
      return (((b - a) / span) * 100).toFixed(3) + "%";
    }

    var lane = el("div", { className: "timeline-lane" });
    var restarts = 0;
    var faults = 0;
    runs.forEach(function (r) {
      var s = parseTime(r.started_at) || lo;
      var e = parseTime(r.ended_at) || (r.end === "running" || r.end === "recovering" ? now : s);
      if (e < s) e = s;
      var bar = el("div", {
        className: "timeline-run",
        "data-end": r.end || "unknown",
        "data-started": r.started_at,
        style: "left:" + pct(s) + ";width:" + width(s, e),
        title: runTitle(r, s, e),
      });
      (r.faults || []).forEach(function (f) {
        faults += 1;
        var t = parseTime(f.time);
        var within = e > s && t ? Math.min(100, Math.max(0, ((t - s) / (e - s)) * 100)) : 100;
        bar.appendChild(
          el("span", {
            className: "timeline-fault",
            "data-kind": f.kind,
            "data-code": f.code,
            style: "left:" + within.toFixed(2) + "%",
            title: "Fault: " + faultText(f),
          })
        );
      });
      lane.appendChild(bar);
      if (r.backoff) {
        restarts += 1;
        var b = r.backoff;
        var from = parseTime(b.from) || e;
        var until = parseTime(b.until) || from + (b.delay || 0) * 1000;
        var gap = el(
          "div",
          {
            className: "timeline-backoff",
            "data-attempt": b.attempt,
            style: "left:" + pct(from) + ";width:" + width(from, Math.max(until, from)),
            title:
              "Backoff wait before restart attempt " + b.attempt + ": " + fmtSeconds(b.delay) + " (" + fmtTime(from, false) + " \u2013 " + fmtTime(until, false) + " UTC)",
          },
          [el("span", { className: "backoff-label", text: "#" + b.attempt })]
        );
        lane.appendChild(gap);
      }
    });
    box.appendChild(lane);
    box.appendChild(axis(lo, hi, pct));
    $("timeline-span").textContent = fmtTime(lo + pad) + " \u2013 " + fmtTime(hi - pad) + " UTC";
    var last = runs[runs.length - 1];
    var parts = [runs.length + " run" + (runs.length === 1 ? "" : "s")];
    parts.push(faults + " fault" + (faults === 1 ? "" : "s"));
    parts.push(restarts + " backoff wait" + (restarts === 1 ? "" : "s"));
    parts.push("latest " + (last.end === "running" ? "still running" : "ended " + (last.end || "unknown")));
    summary.textContent = parts.join(" \u00b7 ");
    return runs;
  }

  function axis(lo, hi, pct) {
    var box = el("div", { className: "timeline-axis", "aria-hidden": "true" });
    var spanS = (hi - lo) / 1000;
    var step = TICK_STEPS[TICK_STEPS.length - 1];
    for (var i = 0; i < TICK_STEPS.length; i++) {
      if (spanS / TICK_STEPS[i] <= 7) {
        step = TICK_STEPS[i];
        break;
      }
    }
    var stepMs = step * 1000;
    var withDate = spanS > 86400 || new Date(lo).getUTCDate() !== new Date(hi).getUTCDate();
    var first = Math.ceil(lo / stepMs) * stepMs;
    for (var t = first; t <= hi; t += stepMs) {
      var label = step >= 86400 ? fmtTime(t).slice(0, 10) : withDate && t === first ? fmtTime(t).slice(5, 16) : fmtTime(t, false).slice(0, step >= 60 ? 5 : 8);
      box.appendChild(el("span", { className: "timeline-tick", style: "left:" + pct(t), text: label }));
    }
    var ticks = box.querySelectorAll(".timeline-tick");
    if (ticks.length) {
      // Keep the end labels inside the lane.
      if (parseFloat(ticks[0].style.left) < 4) ticks[0].classList.add("first");
      if (parseFloat(ticks[ticks.length - 1].style.left) > 96) ticks[ticks.length - 1].classList.add("last");
    }
    return box;
  }

  C.renderTimeline = renderTimeline;
})(window.Conduit);
