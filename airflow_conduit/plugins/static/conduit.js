/* The Conduit pages in the browser: theme, charts (uPlot), recovery timeline, audit log, DLQ browser.
 *
 * No framework and no build step: one script, loaded in <head> so the theme is set before the first
 * paint; the rest waits for the DOM. Every value from the API reaches the page as text (textContent,
 * setAttribute), never as HTML. Times in the state dir are UTC and are shown in UTC, as Airflow shows
 * them by default. The boot data (pipeline id, state dir, API URLs) is the JSON of #conduit-boot.
 */
(function () {
  "use strict";

  var REFRESH_MS = 15000;
  var REPLAY_POLL_MS = 2000;
  var DLQ_PAGE = 50;
  var EVENTS_PAGE = 50;
  var RANGE_LABEL = { hour: "in the last hour", day: "in the last day", run: "in the latest run" };

  // Theme ---------------------------------------------------------------------------------------------
  // Airflow's UI (next-themes) puts class "dark" on its <html> and keeps the choice in localStorage.theme.
  // Framed by it on the same origin, we follow the parent document live; alone, the stored choice, else
  // the system's.
  var media = window.matchMedia ? window.matchMedia("(prefers-color-scheme: dark)") : null;

  function parentRoot() {
    try {
      if (window.parent && window.parent !== window) return window.parent.document.documentElement;
    } catch (e) {
      /* another origin: not Airflow's frame */
    }
    return null;
  }

  function wantedTheme() {
    var root = parentRoot();
    if (root) return root.classList.contains("dark") ? "dark" : "light";
    var stored = null;
    try {
      stored = window.localStorage.getItem("theme");
    } catch (e) {
      /* storage disabled */
    }
    if (stored === "dark" || stored === "light") return stored;
    return media && media.matches ? "dark" : "light";
  }

  function applyTheme() {
    var theme = wantedTheme();
    var html = document.documentElement;
    if (html.getAttribute("data-theme") === theme) return;
    html.setAttribute("data-theme", theme);
    document.dispatchEvent(new CustomEvent("conduit-theme", { detail: theme }));
  }

  applyTheme();
  var parentHtml = parentRoot();
  if (parentHtml && window.MutationObserver) {
    new MutationObserver(applyTheme).observe(parentHtml, { attributes: true, attributeFilter: ["class", "style"] });
  }
  window.addEventListener("storage", function (e) {
    if (e.key === "theme") applyTheme();
  });
  if (media && media.addEventListener) media.addEventListener("change", applyTheme);

  function cssVar(name) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  }

  // Airflow's frame ----------------------------------------------------------------------------------
  // Airflow 3.3 frames external views with sandbox="allow-scripts allow-same-origin allow-forms
  // allow-downloads": no allow-modals (window.confirm() returns false without asking) and no
  // allow-top-navigation (a target="_top" link is blocked). The page asks in a dialog of its own there,
  // and opens Airflow's pages through a link of the parent document, which is same-origin.
  function sandboxLacks(flag) {
    try {
      var frame = window.frameElement;
      return !!(frame && frame.hasAttribute("sandbox") && !frame.sandbox.contains(flag));
    } catch (e) {
      return false;
    }
  }

  /** A promise of the user's yes/no: window.confirm(), or the page's own dialog where that is ignored. */
  function ask(question, action) {
    if (!sandboxLacks("allow-modals")) return Promise.resolve(window.confirm(question));
    var dialog = document.getElementById("confirm");
    if (!dialog || typeof dialog.showModal !== "function") return Promise.resolve(false);
    document.getElementById("confirm-text").textContent = question;
    document.getElementById("confirm-ok").textContent = action || "OK";
    return new Promise(function (resolve) {
      dialog.returnValue = "";
      dialog.addEventListener(
        "close",
        function () {
          resolve(dialog.returnValue === "ok");
        },
        { once: true }
      );
      dialog.showModal();
    });
  }

  function openTop(href) {
    var doc = window.top.document;
    var a = doc.createElement("a");
    a.href = new URL(href, window.location.href).toString();
    doc.body.appendChild(a);
    a.click();
    a.remove();
  }

  document.addEventListener("click", function (e) {
    var link = e.target && e.target.closest ? e.target.closest('a[target="_top"]') : null;
    if (!link || e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
    if (!sandboxLacks("allow-top-navigation") || !sandboxLacks("allow-top-navigation-by-user-activation")) return;
    try {
      openTop(link.getAttribute("href"));
      e.preventDefault();
    } catch (err) {
      /* not same-origin after all: the browser's own handling (blocked or not) */
    }
  });

  // Small helpers -------------------------------------------------------------------------------------
  function $(id) {
    return document.getElementById(id);
  }

  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    if (attrs) {
      Object.keys(attrs).forEach(function (k) {
        var v = attrs[k];
        if (v === null || v === undefined || v === false) return;
        if (k === "text") node.textContent = String(v);
        else if (k === "className") node.className = v;
        else if (k === "style") node.setAttribute("style", v);
        else node.setAttribute(k, v === true ? "" : String(v));
      });
    }
    (children || []).forEach(function (c) {
      if (c === null || c === undefined) return;
      node.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    });
    return node;
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
    return node;
  }

  function num(n) {
    return typeof n === "number" ? n.toLocaleString("en-US") : n === null || n === undefined ? "-" : String(n);
  }

  function parseTime(s) {
    if (!s) return null;
    var t = Date.parse(s);
    return isNaN(t) ? null : t;
  }

  function pad(n) {
    return n < 10 ? "0" + n : String(n);
  }

  /** "2026-11-24 18:17:24" (UTC) of epoch milliseconds. */
  function fmtTime(ms, withDate) {
    if (ms === null || ms === undefined) return "-";
    var d = new Date(ms);
    var time = pad(d.getUTCHours()) + ":" + pad(d.getUTCMinutes()) + ":" + pad(d.getUTCSeconds());
    if (withDate === false) return time;
    return d.getUTCFullYear() + "-" + pad(d.getUTCMonth() + 1) + "-" + pad(d.getUTCDate()) + " " + time;
  }

  function fmtSeconds(s) {
    if (s === null || s === undefined || isNaN(s)) return "-";
    if (s < 1) return (Math.round(s * 100) / 100).toString() + " s";
    if (s < 90) return (Math.round(s * 10) / 10).toString() + " s";
    var m = Math.floor(s / 60);
    if (m < 90) return m + " min " + Math.round(s - m * 60) + " s";
    var h = Math.floor(m / 60);
    return h + " h " + (m - h * 60) + " min";
  }

  function readBoot() {
    var node = $("conduit-boot");
    try {
      return node ? JSON.parse(node.textContent) : {};
    } catch (e) {
      return {};
    }
  }

  // API ----------------------------------------------------------------------------------------------
  // The app passes its URLs in boot.api; any it does not name are the contract's paths under the
  // pipeline's JSON URL (/conduit/api/pipelines/{id}/...). state_dir goes on every request.
  var API_SUFFIX = {
    batches: "/batches",
    timeline: "/timeline",
    events: "/events",
    dlq: "/dlq",
    dlq_acknowledge: "/dlq/acknowledge",
    dlq_replay: "/dlq/replay",
  };

  function Api(boot) {
    this.boot = boot;
    this.urls = boot.api || {};
  }

  Api.prototype.url = function (key, params, suffix) {
    var base = this.urls[key];
    if (!base && API_SUFFIX[key] && this.urls.pipeline) {
      var p = new URL(this.urls.pipeline, window.location.href);
      p.pathname = p.pathname.replace(/\/$/, "") + API_SUFFIX[key];
      base = p.toString();
    }
    if (!base) throw new Error("the page has no URL for " + key);
    var u = new URL(base, window.location.href);
    if (suffix) u.pathname = u.pathname.replace(/\/$/, "") + suffix;
    if (this.boot.state_dir && !u.searchParams.has("state_dir")) u.searchParams.set("state_dir", this.boot.state_dir);
    Object.keys(params || {}).forEach(function (k) {
      var v = params[k];
      if (v !== null && v !== undefined && v !== "") u.searchParams.set(k, String(v));
    });
    return u.toString();
  };

  function request(url, options) {
    var opts = Object.assign({ credentials: "same-origin", headers: { Accept: "application/json" } }, options || {});
    return fetch(url, opts).then(function (resp) {
      return resp.text().then(function (text) {
        var body = null;
        try {
          body = text ? JSON.parse(text) : null;
        } catch (e) {
          body = null;
        }
        if (!resp.ok) {
          var detail = body && body.detail !== undefined ? body.detail : text || resp.statusText;
          if (typeof detail !== "string") detail = JSON.stringify(detail);
          var err = new Error(resp.status + ": " + detail);
          err.status = resp.status;
          throw err;
        }
        return body;
      });
    });
  }

  Api.prototype.get = function (key, params, suffix) {
    return request(this.url(key, params, suffix));
  };

  /** One DLQ entry: boot.api.dlq_entry with its ``{id}`` replaced, else ``{dlq}/{id}``. */
  Api.prototype.entry = function (id) {
    var template = this.urls.dlq_entry;
    if (template && template.indexOf("{id}") >= 0) {
      var u = new URL(template.replace("{id}", encodeURIComponent(id)), window.location.href);
      if (this.boot.state_dir) u.searchParams.set("state_dir", this.boot.state_dir);
      return request(u.toString());
    }
    return this.get("dlq", null, "/" + encodeURIComponent(id));
  };

  Api.prototype.post = function (key, body) {
    return request(this.url(key), {
      method: "POST",
      body: JSON.stringify(body || {}),
      headers: { "Content-Type": "application/json", Accept: "application/json" },
    });
  };

  function showError(id, err) {
    var node = $(id);
    if (node) node.textContent = err ? "Could not load: " + (err.message || err) : "";
  }

  // Header --------------------------------------------------------------------------------------------
  var KNOWN_STATUSES = ["running", "recovering", "degraded", "failed", "stopped", "refused"];

  function statusBadge(status) {
    var s = status || "unknown";
    return el("span", {
      className: "status " + (KNOWN_STATUSES.indexOf(s) >= 0 ? s : "unknown"),
      "data-status": s,
      text: s,
    });
  }

  function errorBox(error) {
    if (!error) return null;
    var head = el("b", { text: [error.kind, error.code].filter(Boolean).join(" ") });
    var parts = [head];
    if (error.node) parts.push(" at " + error.node);
    parts.push(": ");
    parts.push(el("span", { className: "error-message", text: error.message || "" }));
    return el("div", { className: "error" }, parts);
  }

  function renderHeader(d) {
    clear($("pipeline-status")).appendChild(statusBadge(d.status));
    $("updated-at").textContent = d.updated_at ? fmtTime(parseTime(d.updated_at)) : "-";
    var rec = d.recovery || {};
    $("recovery").hidden = !(d.status === "recovering" && rec.attempt);
    $("recovery-attempt").textContent = rec.attempt === undefined ? "" : String(rec.attempt);
    $("recovery-next").textContent = rec.next_start_at || "";
    var box = clear($("last-error"));
    var e = errorBox(d.error);
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

  // Charts --------------------------------------------------------------------------------------------
  function Charts(api) {
    this.api = api;
    this.range = "run";
    this.batches = null;
    this.plots = {};
    this.now = null;
  }

  Charts.prototype.load = function () {
    var self = this;
    var range = this.range;
    return this.api
      .get("batches", { range: range })
      .then(function (data) {
        if (range !== self.range) return; // a later click won
        showError("charts-error", null);
        self.batches = (data && data.batches) || [];
        self.now = data && data.now;
        self.draw(false);
      })
      .catch(function (err) {
        showError("charts-error", err);
      });
  };

  Charts.prototype.setRange = function (range) {
    this.range = range;
    document.querySelectorAll("button[data-range]").forEach(function (b) {
      b.setAttribute("aria-pressed", b.getAttribute("data-range") === range ? "true" : "false");
    });
    return this.load();
  };

  function batchTime(b) {
    return (parseTime(b.ended_at) || parseTime(b.started_at) || 0) / 1000;
  }

  function perSecond(count, seconds) {
    return seconds > 0 ? count / seconds : null;
  }

  /** The charts' data: x = batch end (epoch seconds), one array per series. */
  Charts.prototype.series = function () {
    var bs = this.batches.slice().sort(function (a, b) {
      return batchTime(a) - batchTime(b);
    });
    var x = bs.map(batchTime);
    var lagKeys = [];
    var lagUnits = {};
    bs.forEach(function (b) {
      Object.keys(b.lag || {}).forEach(function (node) {
        if (lagKeys.indexOf(node) < 0) lagKeys.push(node);
        lagUnits[node] = (b.lag[node] && b.lag[node].unit) || "";
      });
    });
    return {
      count: bs.length,
      x: x,
      batches: bs,
      read: bs.map(function (b) {
        return perSecond(b.read, b.seconds);
      }),
      written: bs.map(function (b) {
        return perSecond(b.written, b.seconds);
      }),
      dlq: bs.map(function (b) {
        return b.dlq;
      }),
      duration: bs.map(function (b) {
        return b.seconds;
      }),
      lagKeys: lagKeys,
      lagUnits: lagUnits,
      lag: lagKeys.map(function (node) {
        return bs.map(function (b) {
          var l = b.lag && b.lag[node];
          return l && typeof l.value === "number" ? l.value : null;
        });
      }),
    };
  };

  function fmtValue(v, digits) {
    if (v === null || v === undefined) return "-";
    return v.toLocaleString("en-US", { maximumFractionDigits: digits === undefined ? 1 : digits });
  }

  function chartOptions(width, series, colors, few, opts) {
    var axis = colors.axis;
    var grid = colors.grid;
    return {
      width: width,
      height: 200,
      tzDate: function (ts) {
        return uPlot.tzDate(new Date(ts * 1000), "Etc/UTC");
      },
      cursor: { drag: { x: true, y: false }, points: { size: 7 } },
      scales: {
        x: {
          time: true,
          // Half a batch of room at both ends, so the first and last bars are whole.
          range: function (u, min, max) {
            var n = u.data[0].length;
            var pad = n > 1 ? (max - min) / (n - 1) / 2 : 30;
            return [min - pad, max + pad];
          },
        },
        y: { range: opts.yRange },
      },
      legend: { live: true },
      axes: [
        {
          stroke: axis,
          grid: { stroke: grid, width: 1 },
          ticks: { stroke: grid, width: 1 },
          // 24-hour UTC times, as everywhere on the page; the date where the span crosses days.
          values: function (u, splits) {
            var span = splits.length > 1 ? splits[splits.length - 1] - splits[0] : 0;
            return splits.map(function (ts) {
              var text = fmtTime(ts * 1000);
              return span >= 86400 ? text.slice(5, 16) : span >= 600 ? text.slice(11, 16) : text.slice(11);
            });
          },
        },
        {
          stroke: axis,
          grid: { stroke: grid, width: 1 },
          ticks: { stroke: grid, width: 1 },
          size: 56,
          values: function (u, vals) {
            return vals.map(function (v) {
              return v === null ? "" : Math.abs(v) >= 10000 ? (v / 1000).toLocaleString("en-US") + "k" : v.toLocaleString("en-US");
            });
          },
        },
      ],
      series: [{ label: "batch end (UTC)", value: "{YYYY}-{MM}-{DD} {HH}:{mm}:{ss}" }].concat(
        series.map(function (s) {
          var out = {
            label: s.label,
            stroke: s.color,
            width: 1.6,
            fill: s.fill,
            spanGaps: false,
            points: { show: few, size: 5, stroke: s.color, fill: s.color },
            value: function (u, v) {
              return fmtValue(v, s.digits);
            },
          };
          if (s.bars) {
            out.paths = uPlot.paths.bars({ size: [0.7, 28], align: 0 });
            out.points = { show: false };
          }
          return out;
        })
      ),
    };
  }

  function alpha(color, a) {
    var m = /^#([0-9a-f]{6})$/i.exec(color);
    if (!m) return color;
    var n = parseInt(m[1], 16);
    return "rgba(" + (n >> 16) + "," + ((n >> 8) & 255) + "," + (n & 255) + "," + a + ")";
  }

  /**
   * Draws every chart from this.batches. ``recolor`` rebuilds them (theme change); otherwise a chart
   * whose series are unchanged only gets its new data.
   */
  Charts.prototype.draw = function (recolor) {
    if (!this.batches) return;
    var s = this.series();
    var c = {
      read: cssVar("--c-read"),
      written: cssVar("--c-written"),
      dlq: cssVar("--c-dlq"),
      duration: cssVar("--c-duration"),
      lag: [cssVar("--c-lag-1"), cssVar("--c-lag-2"), cssVar("--c-lag-3")],
      axis: cssVar("--c-axis"),
      grid: cssVar("--c-grid"),
    };
    var few = s.count <= 120;
    var empty = "No batches " + RANGE_LABEL[this.range];
    this.plot("chart-throughput", s, recolor, empty, [
      { label: "read/s", color: c.read, values: s.read },
      { label: "written/s", color: c.written, values: s.written },
    ], c, few, {});
    this.plot("chart-dlq", s, recolor, empty, [
      { label: "dead-lettered", color: c.dlq, fill: alpha(c.dlq, 0.55), values: s.dlq, bars: true, digits: 0 },
    ], c, few, { yRange: [0, null] });
    this.plot("chart-duration", s, recolor, empty, [
      { label: "seconds", color: c.duration, fill: alpha(c.duration, 0.08), values: s.duration, digits: 2 },
    ], c, few, {});
    var hasLag = s.lagKeys.length > 0;
    $("chart-lag-card").hidden = !hasLag;
    $("chart-lag").hidden = !hasLag;
    if (hasLag) {
      this.plot(
        "chart-lag",
        s,
        recolor,
        empty,
        s.lagKeys.map(function (node, i) {
          return { label: node + (s.lagUnits[node] ? " (" + s.lagUnits[node] + ")" : ""), color: c.lag[i % c.lag.length], values: s.lag[i], digits: 0 };
        }),
        c,
        few,
        {}
      );
    } else {
      this.destroy("chart-lag");
      $("chart-lag").removeAttribute("data-points");
    }
  };

  Charts.prototype.destroy = function (id) {
    if (this.plots[id]) {
      this.plots[id].plot.destroy();
      delete this.plots[id];
    }
  };

  Charts.prototype.plot = function (id, s, recolor, emptyText, series, colors, few, opts) {
    var box = $(id);
    var data = [s.x].concat(
      series.map(function (x) {
        return x.values;
      })
    );
    var signature = series
      .map(function (x) {
        return x.label;
      })
      .join("|") + (few ? "|points" : "");
    var existing = this.plots[id];
    if (s.count === 0) {
      this.destroy(id);
      clear(box).appendChild(el("div", { className: "chart-empty", text: emptyText }));
    } else if (existing && !recolor && existing.signature === signature) {
      existing.plot.setData(data);
    } else {
      this.destroy(id);
      clear(box);
      var width = Math.max(280, box.clientWidth || 600);
      var plot = new uPlot(chartOptions(width, series, colors, few, opts), data, box);
      this.plots[id] = { plot: plot, signature: signature };
    }
    box.setAttribute("data-points", String(s.count));
  };

  Charts.prototype.resize = function () {
    var plots = this.plots;
    Object.keys(plots).forEach(function (id) {
      var box = $(id);
      var w = box.clientWidth;
      if (w > 0 && Math.abs(plots[id].plot.width - w) > 2) plots[id].plot.setSize({ width: w, height: 200 });
    });
  };

  // Recovery timeline ---------------------------------------------------------------------------------
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

  // DLQ browser ---------------------------------------------------------------------------------------
  function Dlq(api, onChange) {
    this.api = api;
    this.onChange = onChange;
    this.offset = 0;
    this.total = 0;
    this.filters = { code: "", since: "", until: "" };
    this.replayTimer = null;
  }

  /** A datetime-local value (taken as UTC, like every time on the page) as the API's ISO time. */
  function localInputToIso(value) {
    if (!value) return "";
    var v = value.length === 16 ? value + ":00" : value;
    return v + "Z";
  }

  Dlq.prototype.readFilters = function () {
    this.filters = {
      code: $("dlq-code").value,
      since: localInputToIso($("dlq-since").value),
      until: localInputToIso($("dlq-until").value),
    };
  };

  Dlq.prototype.load = function () {
    var self = this;
    var params = { code: this.filters.code, since: this.filters.since, until: this.filters.until, offset: this.offset, limit: DLQ_PAGE };
    return this.api
      .get("dlq", params)
      .then(function (data) {
        showError("dlq-error", null);
        self.render(data || {});
      })
      .catch(function (err) {
        showError("dlq-error", err);
      });
  };

  Dlq.prototype.render = function (data) {
    var self = this;
    this.total = data.total || 0;
    this.offset = data.offset || 0;
    var limit = data.limit || DLQ_PAGE;
    // Codes: keep the selection, list every code with its count.
    var select = $("dlq-code");
    var chosen = select.value;
    var codes = data.codes || [];
    clear(select).appendChild(el("option", { value: "", text: "all codes" }));
    var sum = 0;
    codes.forEach(function (c) {
      sum += c.count || 0;
      select.appendChild(el("option", { value: c.code, text: c.code + " (" + num(c.count) + ")" }));
    });
    if (chosen && !codes.some(function (c) { return c.code === chosen; })) {
      select.appendChild(el("option", { value: chosen, text: chosen + " (0)" }));
    }
    select.value = chosen;
    $("dlq-summary").textContent = codes.length ? num(sum) + " record" + (sum === 1 ? "" : "s") + " in " + codes.length + " error code" + (codes.length === 1 ? "" : "s") : "";

    var body = clear(document.querySelector("#dlq tbody"));
    var entries = data.entries || [];
    if (!entries.length) {
      body.appendChild(el("tr", null, [el("td", { colspan: "7", className: "muted", text: this.total ? "No records on this page." : "No dead-lettered records match." })]));
    }
    entries.forEach(function (e) {
      var state = e.state || "pending";
      var check = el("input", { type: "checkbox", className: "dlq-select", value: e.id, "aria-label": "Select record " + (e.position || e.id), disabled: state !== "pending" });
      var open = el("button", { type: "button", className: "link dlq-open mono", text: e.position || e.id, title: "Show the whole record" });
      open.addEventListener("click", function () {
        self.open(e);
      });
      body.appendChild(
        el("tr", { className: "dlq-row", "data-id": e.id, "data-state": state }, [
          el("td", { className: "dlq-check" }, [check]),
          el("td", { className: "nowrap", title: e.time, text: fmtTime(parseTime(e.time)) }),
          el("td", { className: "dlq-position" }, [open]),
          el("td", { className: "dlq-code" }, [el("code", { text: e.code || "-" })]),
          el("td", { className: "dlq-node", text: e.node || "-" }),
          el("td", { className: "dlq-message", text: e.message || "" }),
          el("td", null, [el("span", { className: "state-tag " + state, text: state })]),
        ])
      );
    });
    var first = this.total ? this.offset + 1 : 0;
    var last = Math.min(this.offset + entries.length, this.total);
    $("dlq-page-info").textContent = this.total ? num(first) + "\u2013" + num(last) + " of " + num(this.total) : "0 of 0";
    $("dlq-prev").disabled = this.offset <= 0;
    $("dlq-next").disabled = this.offset + limit >= this.total;
    $("dlq-select-all").checked = false;
    this.selectionChanged();
  };

  Dlq.prototype.selected = function () {
    return Array.prototype.map.call(document.querySelectorAll("#dlq input.dlq-select:checked"), function (c) {
      return c.value;
    });
  };

  Dlq.prototype.selectionChanged = function () {
    var n = this.selected().length;
    var ack = $("dlq-acknowledge");
    ack.disabled = n === 0;
    ack.textContent = n ? "Acknowledge " + n + " selected" : "Acknowledge selected";
    var boxes = document.querySelectorAll("#dlq input.dlq-select:not(:disabled)");
    var all = $("dlq-select-all");
    all.checked = boxes.length > 0 && n === boxes.length;
    all.indeterminate = n > 0 && n < boxes.length;
  };

  Dlq.prototype.open = function (entry) {
    var dialog = $("dlq-record");
    var pre = dialog.querySelector("pre");
    $("dlq-record-title").textContent = "DLQ record " + (entry.position || entry.id);
    pre.textContent = "Loading\u2026";
    if (typeof dialog.showModal === "function") {
      if (!dialog.open) dialog.showModal();
    } else {
      dialog.setAttribute("open", "");
    }
    this.api
      .entry(entry.id)
      .then(function (full) {
        pre.textContent = JSON.stringify(full, null, 2);
      })
      .catch(function (err) {
        pre.textContent = "Could not load the record: " + err.message;
      });
  };

  function status(text, kind) {
    var node = $("dlq-status");
    node.textContent = text;
    node.className = kind || "";
  }

  Dlq.prototype.acknowledge = function () {
    var self = this;
    var ids = this.selected();
    if (!ids.length) return;
    var reason = $("dlq-reason").value.trim();
    var question =
      "Acknowledge " + ids.length + " DLQ record" + (ids.length === 1 ? "" : "s") + "?\n\n" +
      "They will never be replayed. The audit log records your name" + (reason ? " and the reason: " + reason : "") + ".";
    ask(question, "Acknowledge")
      .then(function (yes) {
        if (!yes) {
          status("Nothing acknowledged.", "");
          return null;
        }
        status("Acknowledging\u2026", "");
        return self.api.post("dlq_acknowledge", { ids: ids, reason: reason });
      })
      .then(function (r) {
        if (r === null) return;
        var n = r && typeof r.acknowledged === "number" ? r.acknowledged : ids.length;
        status("Acknowledged " + n + " record" + (n === 1 ? "" : "s") + ".", "ok");
        self.load();
        self.onChange();
      })
      .catch(function (err) {
        status("Acknowledge failed: " + err.message, "bad");
      });
  };

  Dlq.prototype.replay = function () {
    var self = this;
    var question =
      "Replay the dead-letter queue of this pipeline?\n\n" +
      "Every pending record (not acknowledged) goes through the pipeline again, in a new Spark job. " +
      "The audit log records your name.";
    ask(question, "Replay")
      .then(function (yes) {
        if (!yes) {
          status("Nothing replayed.", "");
          return null;
        }
        $("dlq-replay").disabled = true;
        status("Starting the replay\u2026", "");
        return self.api.post("dlq_replay", {});
      })
      .then(function (r) {
        if (r === null) return;
        status("Replay started" + (r && r.pid ? " (process " + r.pid + ")" : "") + "; waiting for it to finish\u2026", "");
        self.onChange();
        self.pollReplay();
      })
      .catch(function (err) {
        $("dlq-replay").disabled = false;
        status("Replay not started: " + err.message, "bad");
      });
  };

  /** The latest ``replayed`` audit event in words (its ``text`` when the API gives one). */
  function replayedText(last) {
    if (!last) return "";
    if (last.text) return last.text;
    var parts = [];
    if (typeof last.replayed === "number") parts.push(num(last.replayed) + " record" + (last.replayed === 1 ? "" : "s") + " replayed");
    if (typeof last.delivered === "number") parts.push(num(last.delivered) + " delivered");
    if (typeof last.failed_again === "number") parts.push(num(last.failed_again) + " failed again");
    if (typeof last.filtered === "number" && last.filtered) parts.push(num(last.filtered) + " filtered");
    if (typeof last.remaining === "number" && last.remaining) parts.push(num(last.remaining) + " still pending");
    var text = parts.join(", ");
    if (last.user) text += " (by " + last.user + ")";
    if (last.error) text += "; error: " + (typeof last.error === "object" ? last.error.message || JSON.stringify(last.error) : last.error);
    return text;
  }

  Dlq.prototype.pollReplay = function () {
    var self = this;
    clearTimeout(this.replayTimer);
    this.api
      .get("dlq_replay")
      .then(function (r) {
        if (r && r.running) {
          $("dlq-replay").disabled = true;
          self.replayTimer = setTimeout(function () {
            self.pollReplay();
          }, REPLAY_POLL_MS);
          return;
        }
        $("dlq-replay").disabled = false;
        var text = replayedText(r && r.last);
        status("Replay finished" + (text ? ": " + text : "."), "ok");
        self.load();
        self.onChange();
      })
      .catch(function (err) {
        $("dlq-replay").disabled = false;
        status("Could not follow the replay: " + err.message, "bad");
      });
  };

  /** On page load: a replay still running (started from another tab) keeps the button busy. */
  Dlq.prototype.checkReplay = function () {
    var self = this;
    this.api
      .get("dlq_replay")
      .then(function (r) {
        if (r && r.running) {
          status("A replay is running\u2026", "");
          self.pollReplay();
        }
      })
      .catch(function () {
        /* the DLQ table shows load errors; this is only a hint */
      });
  };

  Dlq.prototype.bind = function () {
    var self = this;
    $("dlq-apply").addEventListener("click", function () {
      self.readFilters();
      self.offset = 0;
      self.load();
    });
    $("dlq-code").addEventListener("change", function () {
      self.readFilters();
      self.offset = 0;
      self.load();
    });
    $("dlq-prev").addEventListener("click", function () {
      self.offset = Math.max(0, self.offset - DLQ_PAGE);
      self.load();
    });
    $("dlq-next").addEventListener("click", function () {
      if (self.offset + DLQ_PAGE < self.total) self.offset += DLQ_PAGE;
      self.load();
    });
    $("dlq-select-all").addEventListener("change", function (e) {
      document.querySelectorAll("#dlq input.dlq-select:not(:disabled)").forEach(function (c) {
        c.checked = e.target.checked;
      });
      self.selectionChanged();
    });
    document.querySelector("#dlq tbody").addEventListener("change", function (e) {
      if (e.target.classList.contains("dlq-select")) self.selectionChanged();
    });
    $("dlq-acknowledge").addEventListener("click", function () {
      self.acknowledge();
    });
    $("dlq-replay").addEventListener("click", function () {
      self.replay();
    });
    $("dlq-record-close").addEventListener("click", function () {
      $("dlq-record").close();
    });
    $("dlq-record").addEventListener("click", function (e) {
      if (e.target === this) this.close(); // a click on the backdrop
    });
  };

  // Pages ---------------------------------------------------------------------------------------------
  function airflowBase(indexHref) {
    var href = indexHref || "";
    var i = href.lastIndexOf("/conduit");
    return i >= 0 ? href.slice(0, i) : "";
  }

  function pipelinePage(boot) {
    var api = new Api(boot);
    var charts = new Charts(api);
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
          var runs = renderTimeline(data, charts.now);
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
    var dlq = new Dlq(api, function () {
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
    }, REFRESH_MS);
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
    }, REFRESH_MS);
  }

  document.addEventListener("DOMContentLoaded", function () {
    var boot = readBoot();
    if (boot.page === "pipeline") pipelinePage(boot);
    else if (boot.page === "index") indexPage(boot);
  });
})();
