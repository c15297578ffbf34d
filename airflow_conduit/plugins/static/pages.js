/* The Conduit pages in the browser, part 5 of 5: the pages themselves. The pipeline page's header
 * (status, counters of the last run, links to the Airflow task instances), audit log and metrics, and
 * the wiring of charts, timeline and DLQ browser with their refresh; the list page's refresh. Needs
 * common.js, and on the pipeline page charts.js, timeline.js and dlq.js (all on window.Conduit).
 */
(function (C) {
  "use strict";

  var $ = C.$;
  var el = C.el;
  var clear = C.clear;
  var parseTime = C.parseTime;
  var fmtTime = C.fmtTime;
  var showError = C.showError;

  var EVENTS_PAGE = 50;

  // Header --------------------------------------------------------------------------------------------
  function renderHeader(d) {
    clear($("pipeline-status")).appendChild(C.statusBadge(d.status));
    $("updated-at").textContent = d.updated_at ? fmtTime(parseTime(d.updated_at)) : "-";
    var rec = d.recovery || {};
    $("recovery").hidden = !(d.status === "recovering" && rec.attempt);
    $("recovery-attempt").textContent = rec.attempt === undefined ? "" : String(rec.attempt);
    $("recovery-next").textContent = rec.next_start_at || "";
    var box = clear($("last-error"));
    var e = C.errorBox(d.error);
    if (e) box.appendChild(e);
    var c = d.counters || {};
    document.querySelectorAll("#counters dd[data-counter]").forEach(function (dd) {
      var k = dd.getAttribute("data-counter");
      if (k === "written") {
        var w = c.written || {};
        var keys = Object.keys(w);
        dd.textContent = keys.length
          ? keys
              .map(function (name) {
                return name + ": " + w[name];
              })
              .join(", ")
          : "-";
      } else if (k === "batches") {
        dd.textContent = d.batches === null || d.batches === undefined ? "-" : String(d.batches);
      } else if (k === "throughput") {
        dd.textContent = typeof d.throughput === "number" ? d.throughput.toFixed(1) : "-";
      } else {
        dd.textContent = c[k] === undefined ? "-" : String(c[k]);
      }
    });
    renderMetrics(d.metrics || {});
  }

  function renderMetrics(metrics) {
    var body = clear(document.querySelector("#metrics tbody"));
    Object.keys(metrics)
      .filter(function (k) {
        return k.indexOf("_bucket{") < 0; // histogram buckets would fill the table; sums and counts stay
      })
      .sort()
      .forEach(function (k) {
        body.appendChild(
          el("tr", null, [
            el("td", null, [el("code", { text: k })]),
            el("td", { className: "num", text: String(metrics[k]) }),
          ])
        );
      });
  }

  /** Links to the Airflow task instances that ran the pipeline (from the runs' ``airflow`` context). */
  function renderAirflowRuns(runs, airflowBase) {
    var box = clear($("airflow-runs"));
    var seen = {};
    var links = [];
    runs
      .slice()
      .reverse()
      .forEach(function (run) {
        var a = run.airflow;
        if (!a || !a.dag_id || !a.run_id || !a.task_id) return;
        var key = [a.dag_id, a.run_id, a.task_id, a.map_index].join("\u0000");
        if (seen[key]) return;
        seen[key] = true;
        var href =
          airflowBase +
          "/dags/" +
          encodeURIComponent(a.dag_id) +
          "/runs/" +
          encodeURIComponent(a.run_id) +
          "/tasks/" +
          encodeURIComponent(a.task_id);
        if (a.map_index !== undefined && a.map_index !== null && Number(a.map_index) >= 0) {
          href += "/mapped/" + encodeURIComponent(a.map_index);
        }
        var label = a.dag_id + " / " + a.run_id + " / " + a.task_id;
        if (a.map_index !== undefined && a.map_index !== null && Number(a.map_index) >= 0) label += " [" + a.map_index + "]";
        if (a.try_number) label += " (try " + a.try_number + ")";
        var dot = el("i", { className: "dot", style: "background:var(--st-" + (run.end || "unknown") + ")" });
        links.push(
          el("a", { className: "airflow-run", href: href, target: "_top", title: "Open this task instance in Airflow (" + (run.end || "") + ")" }, [
            dot,
            label,
          ])
        );
      });
    if (!links.length) return;
    box.appendChild(el("span", { className: "muted", text: "Run by Airflow:" }));
    links.slice(0, 8).forEach(function (a) {
      box.appendChild(a);
    });
    if (links.length > 8) box.appendChild(el("span", { className: "muted", text: "and " + (links.length - 8) + " earlier" }));
  }

  // Audit events --------------------------------------------------------------------------------------
  var BAD_EVENTS = ["fault", "failed", "degraded", "refused", "error", "stopped_on_error"];
  var WARN_EVENTS = ["recovering", "restarted", "acked", "replay_requested"];
  var GOOD_EVENTS = ["started", "replayed", "stopped", "completed"];

  function renderEvents(data) {
    var body = clear(document.querySelector("#events tbody"));
    var events = (data && data.events) || [];
    if (!events.length) {
      body.appendChild(el("tr", null, [el("td", { colspan: "3", className: "muted", text: "No events yet." })]));
      return events;
    }
    events.forEach(function (e) {
      var name = e.event || "";
      var cls = BAD_EVENTS.indexOf(name) >= 0 ? "bad" : WARN_EVENTS.indexOf(name) >= 0 ? "warn" : GOOD_EVENTS.indexOf(name) >= 0 ? "good" : "";
      var details = e.details && Object.keys(e.details).length ? e.details : null;
      var text = el("td", { className: "event-text" }, [e.text || name]);
      var row = el("tr", { className: "event-row " + cls, "data-event": name }, [
        el("td", { className: "event-time", title: e.time, text: fmtTime(parseTime(e.time)) }),
        el("td", { className: "event-name" }, [el("span", { className: "event-tag", text: name })]),
        text,
      ]);
      if (details) {
        // The raw fields stay one click away, for whoever needs more than the sentence.
        row.appendChild(
          el("td", { className: "event-details" }, [
            el("details", null, [el("summary", { text: "fields" }), el("pre", { text: JSON.stringify(details, null, 2) })]),
          ])
        );
      } else {
        row.appendChild(el("td", { className: "event-details" }));
      }
      body.appendChild(row);
    });
    return events;
  }
  // Pages ---------------------------------------------------------------------------------------------
  function airflowBase(indexHref) {
    var href = indexHref || "";
    var i = href.lastIndexOf("/conduit");
    return i >= 0 ? href.slice(0, i) : "";
  }

  function pipelinePage(boot) {
    var api = new C.Api(boot);
    var charts = new C.Charts(api);
    var eventsLimit = EVENTS_PAGE;
    var base = airflowBase(boot.index_href);

    function loadHeader() {
      if (!api.urls.pipeline) return Promise.resolve();
      return api
        .get("pipeline")
        .then(renderHeader)
        .catch(function () {
          /* the header keeps its server-rendered values */
        });
    }
    function loadTimeline() {
      return api
        .get("timeline")
        .then(function (data) {
          showError("timeline-error", null);
          var runs = C.renderTimeline(data, charts.now);
          renderAirflowRuns(runs, base);
        })
        .catch(function (err) {
          showError("timeline-error", err);
        });
    }
    function loadEvents() {
      return api
        .get("events", { limit: eventsLimit })
        .then(function (data) {
          showError("events-error", null);
          var events = renderEvents(data);
          $("events-more").hidden = events.length < eventsLimit;
        })
        .catch(function (err) {
          showError("events-error", err);
        });
    }
    var dlq = new C.Dlq(api, function () {
      loadEvents();
      loadTimeline();
      loadHeader();
    });

    document.querySelectorAll("button[data-range]").forEach(function (b) {
      b.addEventListener("click", function () {
        charts.setRange(b.getAttribute("data-range"));
      });
    });
    $("events-more").addEventListener("click", function () {
      eventsLimit += EVENTS_PAGE;
      loadEvents();
    });
    dlq.bind();
    document.addEventListener("conduit-theme", function () {
      charts.draw(true);
    });
    if (window.ResizeObserver) {
      new ResizeObserver(function () {
        charts.resize();
      }).observe($("charts-panel"));
    }

    charts.load().then(loadTimeline);
    loadEvents();
    loadHeader();
    dlq.load();
    dlq.checkReplay();

    // Live: everything but the DLQ table, which would lose the reader's selection and page.
    setInterval(function () {
      if (document.hidden) return;
      loadHeader();
      charts.load();
      loadTimeline();
      loadEvents();
    }, C.REFRESH_MS);
  }

  function indexPage() {
    // The list is server-rendered; refreshing swaps in the same page's new panel.
    setInterval(function () {
      if (document.hidden) return;
      fetch(window.location.href, { credentials: "same-origin" })
        .then(function (r) {
          return r.ok ? r.text() : null;
        })
        .then(function (html) {
          if (!html) return;
          var doc = new DOMParser().parseFromString(html, "text/html");
          var fresh = doc.getElementById("pipelines-panel");
          var current = $("pipelines-panel");
          if (fresh && current) current.replaceWith(document.importNode(fresh, true));
        })
        .catch(function () {
          /* keep what is shown */
        });
    }, C.REFRESH_MS);
  }

  document.addEventListener("DOMContentLoaded", function () {
    var boot = C.readBoot();
    if (boot.page === "pipeline") pipelinePage(boot);
    else if (boot.page === "index") indexPage(boot);
  });
})(window.Conduit);
